"""The vLLM logits recorder's arithmetic: right statistics, and the same bits in any batch.

A PreSTO call decodes a row beside tens of others while the sequential chain decodes it
alone, so a row's statistics must not depend on which rows share its step.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/install.sh installs the CPU build)", allow_module_level=True)

from vllm.v1.sample.logits_processor import MoveDirectionality

from presto.engines.vllm_recorder import (
    ACCELERATOR_CHUNK_ROWS,
    CHUNK_ROWS,
    KEY,
    TEMPERATURES,
    LogZRecorder,
    chunked_statistics,
    row_statistics,
)

VOCAB = 49152  # SmolLM2's: above torch's grain size, so its reductions run on several threads
ROW_TEMPERATURES = (0.5, 0.25, 0.5, 1.0, 0.3)  # a MultiTryMH row: its own temperature, the set; 0.3 takes exp


@pytest.fixture(scope="module")
def logits() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(2 * CHUNK_ROWS + 3, VOCAB, generator=generator) * 4
    z[1, :100] = float("-inf")  # masked tokens
    return z


def test_statistics_match_a_float64_reference(logits):
    lse1, entropy, lse_t = row_statistics(logits, ROW_TEMPERATURES)
    z = logits.to(torch.float64)
    p = torch.softmax(z, dim=-1)
    reference_entropy = -(p * torch.log_softmax(z, dim=-1)).nan_to_num().sum(-1)
    assert torch.allclose(torch.tensor(lse1, dtype=torch.float64), torch.logsumexp(z, -1), rtol=0, atol=1e-12)
    assert torch.allclose(torch.tensor(entropy, dtype=torch.float64), reference_entropy, rtol=0, atol=1e-10)
    for column, t in enumerate(ROW_TEMPERATURES):
        got = torch.tensor([row[column] for row in lse_t], dtype=torch.float64)
        assert torch.allclose(got, torch.logsumexp(z / t, -1), rtol=0, atol=1e-12)
    assert [row[3] for row in lse_t] == lse1  # t = 1 is LSE(z) itself
    assert [row[0] for row in lse_t] == [row[2] for row in lse_t]  # a repeated temperature, one value


@pytest.mark.parametrize("size", [1, 2, 3, CHUNK_ROWS])
def test_a_row_gets_the_same_bits_in_any_chunk(logits, size):
    whole = row_statistics(logits, ROW_TEMPERATURES)
    for start in range(0, len(logits), size):
        part = row_statistics(logits[start : start + size], ROW_TEMPERATURES)
        for got, expected in zip(part, whole, strict=True):
            assert got == expected[start : start + size]


def test_rows_without_temperatures_get_empty_columns(logits):
    lse1, entropy, lse_t = row_statistics(logits[:3], ())
    assert lse_t == [[], [], []] and len(lse1) == len(entropy) == 3


@pytest.mark.parametrize("chunk_rows, pad", [(CHUNK_ROWS, False), (ACCELERATOR_CHUNK_ROWS, True), (5, True)])
def test_chunking_and_padding_change_no_bit(logits, chunk_rows, pad):
    whole = row_statistics(logits, ROW_TEMPERATURES)
    every = list(range(len(logits)))
    assert chunked_statistics(logits, every, ROW_TEMPERATURES, chunk_rows, pad) == whole
    assert chunked_statistics(logits, [3], ROW_TEMPERATURES, chunk_rows, pad) == tuple(v[3:4] for v in whole)
    some = [0, 4, 5, 9]
    assert chunked_statistics(logits, some, ROW_TEMPERATURES, chunk_rows, pad) == tuple(
        [v[i] for i in some] for v in whole
    )


class _Params:
    def __init__(self, key: str, temperatures: tuple[float, ...]) -> None:
        self.extra_args = {KEY: key, TEMPERATURES: temperatures}


class _Batch:
    def __init__(self, added) -> None:
        self.removed, self.moved = [], []
        self.added = [(index, params, None, None) for index, params in added]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_recorder_records_each_row_once_whatever_its_chunking(logits, device):
    """Built for an accelerator, the recorder pads its chunks; the records must not change."""
    recorder = LogZRecorder(None, torch.device(device), False)
    assert (recorder.chunk_rows, recorder.pad_chunks) == (
        (CHUNK_ROWS, False) if device == "cpu" else (ACCELERATOR_CHUNK_ROWS, True)
    )
    # Two temperature groups interleaved in the batch; row 2 belongs to someone else.
    sets = {0: (0.25,), 1: (0.5, 0.25), 3: (0.25,), 4: (0.5, 0.25)}
    recorder.update_state(_Batch([(row, _Params(f"r{row}", t)) for row, t in sets.items()]))
    step = logits[:5]
    for _ in range(2):  # two decode steps
        assert recorder.apply(step) is step  # logits pass through untouched
    for row, temperatures in sets.items():
        lse1, entropy, lse_t = row_statistics(logits[row : row + 1], temperatures)
        record = recorder.pop(f"r{row}")
        assert record.lse1 == lse1 * 2 and record.entropy == entropy * 2 and record.lse_t == lse_t * 2
    assert recorder.pop("r2") is None


def test_a_step_reads_nothing_back_from_the_device(logits):
    """On a GPU a host read in ``apply`` would stall every decode step; on the meta device any read fails."""
    recorder = LogZRecorder(None, torch.device("meta"), False)
    sets = {0: (0.25,), 1: (0.5, 0.25), 2: (0.25,), 3: (0.25,)}
    recorder.update_state(_Batch([(row, _Params(f"r{row}", t)) for row, t in sets.items()]))
    step = torch.empty((4, logits.shape[1]), device="meta")
    for _ in range(3):
        assert recorder.apply(step) is step
    assert [keys for keys, _ in recorder.pending] == [["r0", "r2", "r3"], ["r1"]] * 3


def test_records_are_handed_over_with_every_step_so_far(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(_Batch([(0, _Params("a", (0.25,))), (1, _Params("b", (0.25,)))]))
    recorder.apply(logits[:2])
    first = recorder.pop("a")
    assert len(first.lse1) == 1 and not recorder.pending
    recorder.apply(logits[2:4])  # "a" was handed over: its row of this step belongs to nobody
    second = recorder.pop("b")
    lse1, entropy, lse_t = row_statistics(logits[[1, 3]], (0.25,))
    assert (second.lse1, second.entropy, second.lse_t) == (lse1, entropy, lse_t)


def test_consecutive_rows_are_taken_as_a_view(logits):
    """A list index on a CUDA tensor waits for the stream; vLLM's condensed batch gives consecutive rows."""
    from presto.engines.vllm_recorder import _take_rows

    view = _take_rows(logits, [2, 3, 4])
    assert view.data_ptr() == logits[2].data_ptr() and torch.equal(view, logits[2:5])
    assert torch.equal(_take_rows(logits, [0, 2, 3]), logits[[0, 2, 3]])


def test_rows_moved_by_vllm_between_steps_keep_their_records(logits):
    """The groups (and their device index) are rebuilt when the batch changes; a swap must follow its rows."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    sets = {0: (0.25,), 1: (0.5, 0.25), 2: (0.25,), 3: (0.5, 0.25)}  # interleaved, as MultiTryMH's
    recorder.update_state(_Batch([(row, _Params(f"r{row}", t)) for row, t in sets.items()]))
    recorder.apply(logits[:4])
    swap = _Batch([])
    swap.moved = [(0, 1, MoveDirectionality.SWAP)]  # r0 now in row 1, r1 in row 0
    recorder.update_state(swap)
    recorder.apply(logits[4:8])
    for key, first, second in (("r0", 0, 5), ("r1", 1, 4), ("r2", 2, 6), ("r3", 3, 7)):
        lse1, entropy, lse_t = row_statistics(logits[[first, second]], sets[int(key[1])])
        record = recorder.pop(key)
        assert (record.lse1, record.entropy, record.lse_t) == (lse1, entropy, lse_t)
