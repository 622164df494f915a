"""Gaps found by a mutation review of the vLLM logits recorder and of the batch-invariance switches.

The recorder (presto.engines.vllm_recorder) is driven here as vLLM drives it, with real
``BatchUpdate`` and ``SamplingParams`` objects and logits tensors, without starting an
engine: what ``validate_params`` refuses, how ``update_state`` follows rows that vLLM
removes, adds over others, moves or swaps (a row without a key is nobody's), the KV-cache
peak sampled at every step, the records handed over once, the padded chunks of an
accelerator, the odd powers of ``exp`` for t = 1/k, and the caller's logits left as they
are. The invariance module (presto.engines.vllm_batch_invariance) is checked with a fake
oneDNN matmul: the one-row GEMM padding, installed once, idle while invariance is off,
and the environment exported and withdrawn only where it is this module's own.
"""

from __future__ import annotations

import gc
import importlib.util
import math
import os
import warnings
import weakref
from types import SimpleNamespace

import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/install.sh installs the CPU build)", allow_module_level=True)

from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from presto.engines import vllm_recorder
from presto.engines.vllm_recorder import (
    ACCELERATOR_CHUNK_ROWS,
    CHUNK_ROWS,
    KEY,
    PAD_COLUMNS,
    TEMPERATURES,
    LogZRecorder,
    chunked_statistics,
    chunked_table,
    row_index,
    row_statistics,
    statistics_table,
)

VOCAB = 1000  # not a multiple of PAD_COLUMNS: an accelerator's chunks are padded


@pytest.fixture(scope="module")
def logits() -> torch.Tensor:
    z = torch.randn(24, VOCAB, generator=torch.Generator().manual_seed(3)) * 4
    z[2, :50] = float("-inf")  # masked tokens
    return z


def params(key: str | None = None, temperatures: tuple[float, ...] | None = None) -> SamplingParams:
    extra = {}
    if key is not None:
        extra[KEY] = key
    if temperatures is not None:
        extra[TEMPERATURES] = temperatures
    return SamplingParams(extra_args=extra or None)


def update(added=(), removed=(), moved=()) -> BatchUpdate:
    return BatchUpdate(
        batch_size=0,
        removed=list(removed),
        added=[(index, p, None, []) for index, p in added],
        moved=list(moved),
    )


def expected(logits: torch.Tensor, rows: list[int], temperatures: tuple[float, ...]):
    """What one request's record holds after steps whose row was ``rows[i]`` of ``logits``."""
    return row_statistics(logits[rows], temperatures)


def record_of(recorder: LogZRecorder, key: str):
    record = recorder.pop(key)
    return record.lse1, record.entropy, record.lse_t


# --- validate_params, is_argmax_invariant -------------------------------------------------


@pytest.mark.parametrize("temperatures", [(0.0,), (-0.5,), (0.25, 0.0), (math.nan,), (math.inf,), (5e-309,)])
def test_validate_params_refuses_temperatures_that_are_not_finite_and_above_zero(temperatures):
    """inf would make the power round(1/t) zero and unmask the -inf logits; a subnormal t would
    overflow round(1/t): both are refused up front, like t <= 0 and NaN."""
    with pytest.raises(ValueError, match="must hold finite temperatures > 0"):
        LogZRecorder.validate_params(params("k", temperatures))


@pytest.mark.parametrize("temperatures", [0.25, "0.25"])
def test_validate_params_refuses_temperatures_that_are_not_a_list(temperatures):
    """A bare number would be a TypeError deep in the check, and a string would be read digit by digit."""
    with pytest.raises(ValueError, match="must be a list of temperatures"):
        LogZRecorder.validate_params(params("k", temperatures))


def test_validate_params_refuses_a_key_that_is_not_a_string_and_accepts_requests_without_extra_args():
    with pytest.raises(ValueError, match="must be a str"):
        LogZRecorder.validate_params(params(3, (0.25,)))
    LogZRecorder.validate_params(params("k", (0.25, 1.0, 7.5)))
    LogZRecorder.validate_params(SamplingParams())  # someone else's request: extra_args is None
    LogZRecorder.validate_params(params(temperatures=(0.5,)))  # no key: nobody's, still valid


def test_the_recorder_asks_vllm_for_the_raw_logits():
    """Only a processor that is not argmax-invariant runs before penalties and temperature scaling."""
    assert LogZRecorder(None, torch.device("cpu"), False).is_argmax_invariant() is False


# --- instances ----------------------------------------------------------------------------


def test_every_live_recorder_is_listed_and_the_list_does_not_keep_it_alive():
    """The engine finds the instance vLLM built for it in ``instances``; a closed engine's recorder must go."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    assert recorder in LogZRecorder.instances
    ref = weakref.ref(recorder)
    del recorder
    gc.collect()
    assert ref() is None


# --- update_state ---------------------------------------------------------------------------


def test_no_batch_change_keeps_every_row(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (1, params("b", (0.5,)))]))
    recorder.apply(logits[:2])
    recorder.update_state(None)  # vLLM: no change to the batch's makeup this step
    recorder.apply(logits[2:4])
    assert record_of(recorder, "a") == expected(logits, [0, 2], (0.5,))
    assert record_of(recorder, "b") == expected(logits, [1, 3], (0.5,))


def test_a_removed_row_is_recorded_no_more(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (1, params("b", (0.5,)))]))
    recorder.apply(logits[:2])
    recorder.update_state(update(removed=[1]))
    recorder.apply(logits[2:3])  # the batch shrank to one row
    assert record_of(recorder, "a") == expected(logits, [0, 2], (0.5,))
    assert record_of(recorder, "b") == expected(logits, [1], (0.5,))


@pytest.mark.parametrize("foreign", [SamplingParams(), params(temperatures=(0.5,))], ids=["no-extra-args", "no-key"])
def test_a_request_without_a_key_added_over_ours_takes_its_row_and_is_not_recorded(logits, foreign):
    """vLLM: an added request may replace the one at its index without the latter being listed as removed."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (1, params("b", (0.5,)))]))
    recorder.apply(logits[:2])
    recorder.update_state(update(added=[(0, foreign)]))
    recorder.apply(logits[2:4])
    assert set(recorder.records) == {"a", "b"}  # the foreign row got no record
    assert record_of(recorder, "a") == expected(logits, [0], (0.5,))
    assert record_of(recorder, "b") == expected(logits, [1, 3], (0.5,))


def test_a_request_without_temperatures_gets_empty_columns(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a"))]))
    recorder.apply(logits[:1])
    record = recorder.pop("a")
    assert record.temperatures == ()
    assert (record.lse1, record.entropy, record.lse_t) == expected(logits, [0], ())
    assert record.lse_t == [[]]


def test_a_preempted_request_added_again_keeps_its_history(logits):
    """Even when another request's record was handed over (its steps flushed) while it waited."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.25,))), (1, params("b", (0.25,)))]))
    recorder.apply(logits[:2])
    recorder.update_state(update(removed=[0]))  # "a" preempted
    recorder.apply(logits[2:4])
    recorder.update_state(update(removed=[1]))  # "b" finished and handed over
    assert record_of(recorder, "b") == expected(logits, [1, 3], (0.25,))
    recorder.update_state(update(added=[(0, params("a", (0.25,)))]))  # "a" resumed
    recorder.apply(logits[4:5])
    assert record_of(recorder, "a") == expected(logits, [0, 4], (0.25,))


def test_a_one_way_move_vacates_its_source_row(logits):
    """vLLM condenses its batch: the last row moves into a hole, and the batch gets shorter."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    added = [(row, params(f"r{row}", (0.5,))) for row in range(3)]
    recorder.update_state(update(added=added))
    recorder.apply(logits[:3])
    recorder.update_state(update(removed=[1], moved=[(2, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    recorder.apply(logits[3:5])  # two rows left: r0, then r2
    assert record_of(recorder, "r0") == expected(logits, [0, 3], (0.5,))
    assert record_of(recorder, "r1") == expected(logits, [1], (0.5,))
    assert record_of(recorder, "r2") == expected(logits, [2, 4], (0.5,))


def test_a_foreign_row_moved_over_ours_replaces_it(logits):
    """vLLM: a moved request may replace the one at its destination."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, SamplingParams()), (1, params("b", (0.5,)))]))
    recorder.apply(logits[:2])
    recorder.update_state(update(moved=[(0, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    recorder.apply(logits[2:4])
    assert record_of(recorder, "b") == expected(logits, [1], (0.5,))


def test_a_swap_with_a_foreign_row_leaves_that_row_nobodys(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (1, SamplingParams())]))
    recorder.apply(logits[:2])
    recorder.update_state(update(moved=[(0, 1, MoveDirectionality.SWAP)]))
    recorder.apply(logits[2:4])
    assert set(recorder.records) == {"a"}
    assert record_of(recorder, "a") == expected(logits, [0, 3], (0.5,))


# --- apply ----------------------------------------------------------------------------------


def test_the_kv_cache_peak_is_sampled_at_every_step_even_without_rows_of_ours(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    usage = iter([0.2, 0.7, 0.4, 0.9, 0.1])
    recorder.usage_probe = lambda: next(usage)
    recorder.apply(logits[:2])  # nobody's rows (someone else's requests): the peak still counts
    assert recorder.peak_usage == 0.2
    recorder.update_state(update(added=[(0, params("a", (0.5,)))]))
    for expected_peak in (0.7, 0.7, 0.9, 0.9):  # the largest so far, not the last
        recorder.apply(logits[:2])
        assert recorder.peak_usage == expected_peak


def test_a_row_beyond_the_logits_is_an_error_not_a_shifted_record(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (2, params("c", (0.5,)))]))
    with pytest.raises(RuntimeError, match="lost track of rows"):
        recorder.apply(logits[:2])  # row 2 is one past the last logits row
    with pytest.raises(RuntimeError, match="lost track of rows"):
        recorder.apply(logits[:1])


def test_interleaved_groups_longer_than_a_chunk_record_their_own_rows(logits):
    """MultiTryMH's temperature groups interleave: a group's rows are gathered by its device index, chunk by chunk."""
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    sets = {row: ((0.25,) if row % 2 else (0.5, 0.25)) for row in range(2 * CHUNK_ROWS + 4)}
    recorder.update_state(update(added=[(row, params(f"r{row}", t)) for row, t in sets.items()]))
    n = len(sets)
    recorder.apply(logits[:n])
    recorder.apply(logits.flip(0)[:n])
    for row, temperatures in sets.items():
        assert record_of(recorder, f"r{row}") == expected(logits, [row, len(logits) - 1 - row], temperatures), row


def test_an_accelerators_recorder_pads_its_chunks_to_one_aligned_shape(logits, monkeypatch):
    """Every chunk ACCELERATOR_CHUNK_ROWS rows and a multiple of PAD_COLUMNS wide (rows on 512-byte boundaries)."""
    shapes = []
    original = vllm_recorder.statistics_table

    def spy(block, temperatures):
        shapes.append(tuple(block.shape))
        return original(block, temperatures)

    monkeypatch.setattr(vllm_recorder, "statistics_table", spy)
    recorder = LogZRecorder(None, torch.device("cuda"), False)  # built for a GPU; fed CPU logits
    sets = {0: (0.25,), 1: (0.5,), 2: (0.25,), 3: (0.25,)}
    recorder.update_state(update(added=[(row, params(f"r{row}", t)) for row, t in sets.items()]))
    recorder.apply(logits[:4])
    assert shapes and all(rows == ACCELERATOR_CHUNK_ROWS for rows, _ in shapes)
    assert all(width % PAD_COLUMNS == 0 and width >= VOCAB and (width * 8) % 512 == 0 for _, width in shapes)
    for row, temperatures in sets.items():
        got = record_of(recorder, f"r{row}")
        for values, want in zip(got, expected(logits, [row], temperatures), strict=True):
            assert torch.allclose(torch.tensor(values), torch.tensor(want), rtol=0, atol=1e-12)


# --- pop --------------------------------------------------------------------------------------


def test_a_record_is_handed_over_once_and_later_steps_do_not_reach_it(logits):
    recorder = LogZRecorder(None, torch.device("cpu"), False)
    recorder.update_state(update(added=[(0, params("a", (0.5,))), (1, params("b", (0.5,)))]))
    recorder.apply(logits[:2])
    first = recorder.pop("a")
    assert "a" not in recorder.records and recorder.pop("a") is None
    recorder.apply(logits[2:4])  # "a" is still in the batch, but handed over
    recorder.pop("b")
    assert (first.lse1, first.entropy, first.lse_t) == expected(logits, [0], (0.5,))
    assert recorder.pop("a") is None


# --- chunked_table, row_index, statistics_table ---------------------------------------------


@pytest.mark.parametrize("pad", [False, True])
def test_no_rows_give_an_empty_table(logits, pad):
    assert chunked_statistics(logits, [], (0.25, 0.5), CHUNK_ROWS, pad) == ([], [], [])
    table = chunked_table(logits, [], (0.25, 0.5), CHUNK_ROWS, pad)
    assert table.shape == (0, 4) and table.dtype == torch.float64


def test_row_index_is_none_for_consecutive_rows_and_the_rows_on_the_device_otherwise():
    assert row_index([3], torch.device("cpu")) is None
    assert row_index([2, 3, 4], torch.device("cpu")) is None
    index = row_index([0, 2, 3], torch.device("cpu"))
    assert index is not None and index.tolist() == [0, 2, 3] and index.device.type == "cpu"
    assert row_index([3, 2], torch.device("cpu")).tolist() == [3, 2]


@pytest.mark.parametrize("rows", [1, 3])
def test_float64_logits_are_left_as_they_were(logits, rows):
    z = logits[:rows].to(torch.float64)
    before = z.clone()
    statistics_table(z, (0.25, 0.3))
    assert torch.equal(z, before)


@pytest.mark.parametrize("vocab", [50257, 128256])
def test_a_lone_row_gets_the_bits_it_gets_in_a_chunk_when_torch_splits_sums_across_threads(vocab):
    """Alone, a row's sums are split across threads (one output); beside a copy of itself it gets a chunk's arithmetic.

    The tests run on one thread (conftest), where nothing is split: two threads are set here.
    """
    z = torch.randn(4, vocab, generator=torch.Generator().manual_seed(vocab)) * 4
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        whole = row_statistics(z, (0.25, 0.3))
        alone = [row_statistics(z[row : row + 1], (0.25, 0.3)) for row in range(len(z))]
    finally:
        torch.set_num_threads(threads)
    for row, got in enumerate(alone):
        assert got == tuple(values[row : row + 1] for values in whole), row


def test_temperatures_one_over_an_odd_integer_match_a_float64_reference(logits):
    """t = 1/k takes exp(y)**k by repeated squaring; odd k multiply by exp(y) once more."""
    temperatures = (1 / 3, 0.2, 1 / 7, 1 / 9, 1 / 15, 1 / 16)
    _, _, lse_t = row_statistics(logits, temperatures)
    z = logits.to(torch.float64)
    for column, t in enumerate(temperatures):
        got = torch.tensor([row[column] for row in lse_t], dtype=torch.float64)
        assert torch.allclose(got, torch.logsumexp(z / t, -1), rtol=0, atol=1e-12), t


def test_temperatures_one_over_k_up_to_max_power_take_no_second_exp_pass(logits, monkeypatch):
    """MAX_POWER: the largest k for which LSE(z * k) reuses exp(y) ** k (exp of a float64 row is the costly step)."""
    calls = []
    original = torch.exp

    def counting_exp(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "exp", counting_exp)
    statistics_table(logits[:3], tuple(1 / k for k in range(2, vllm_recorder.MAX_POWER + 1)))
    assert len(calls) == 1
    calls.clear()
    statistics_table(logits[:3], (0.3, 1 / (vllm_recorder.MAX_POWER + 1)))
    assert len(calls) == 3


# --- vllm_batch_invariance ---------------------------------------------------------------------


@pytest.fixture
def switches(monkeypatch):
    """The module with fresh state, a fake oneDNN matmul (``x @ handler``, its inputs' shapes in ``calls``),
    and both of its variables as the test found them."""
    from vllm import _custom_ops as ops

    from presto.engines import vllm_batch_invariance as module

    monkeypatch.setattr(module, "_exported", set())
    monkeypatch.setattr(module, "_state", {"pad_lone_rows": False, "installed": False})
    monkeypatch.setattr(module, "_open_cpu_engines", weakref.WeakKeyDictionary())
    for name in ("VLLM_CPU_ATTN_SPLIT_KV", "VLLM_BATCH_INVARIANT"):
        monkeypatch.setenv(name, "unset")  # recorded, so whatever configure exports is undone after
        monkeypatch.delenv(name)
    calls = []

    def fake_mm(handler, x, bias):
        calls.append(tuple(x.shape))
        return x @ handler

    monkeypatch.setattr(ops, "onednn_mm", fake_mm)
    return SimpleNamespace(module=module, ops=ops, calls=calls)


def test_configure_refreshes_vllms_cached_environment_on_every_platform(switches, monkeypatch):
    """vLLM caches its environment once an engine has started: the next engine must see the new values."""
    from vllm import envs

    refreshed = []
    monkeypatch.setattr(envs, "disable_envs_cache", lambda: refreshed.append(1))
    switches.module.configure(True, "cuda")
    assert refreshed == [1]
    switches.module.configure(True, "cpu")
    assert refreshed == [1, 1]


def test_a_users_split_kv_already_off_is_no_reason_to_warn_and_stays(switches, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        switches.module.configure(True, "cpu")
    assert os.environ["VLLM_CPU_ATTN_SPLIT_KV"] == "0"
    switches.module.configure(False, "cpu")
    assert os.environ["VLLM_CPU_ATTN_SPLIT_KV"] == "0"  # the user's: never withdrawn


def test_a_users_own_batch_invariant_switch_is_kept_even_when_it_matches_ours(switches, monkeypatch):
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    switches.module.configure(True, "cuda")
    with pytest.warns(UserWarning, match="differs from the first"):
        switches.module.configure(False, "cuda")
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1"


def test_the_one_row_padding_is_installed_once_and_idle_while_invariance_is_off(switches):
    fake = switches.ops.onednn_mm
    switches.module.configure(False, "cpu")
    assert switches.ops.onednn_mm is fake  # nothing to install while off
    switches.module.configure(True, "cpu")
    wrapper = switches.ops.onednn_mm
    assert wrapper is not fake
    switches.module.configure(True, "cpu")
    assert switches.ops.onednn_mm is wrapper  # once per process
    weight = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    row = torch.randn(1, 6, generator=torch.Generator().manual_seed(1))
    switches.module.configure(False, "cpu")
    assert torch.equal(wrapper(weight, row, None), row @ weight)
    assert switches.calls == [(1, 6)]  # off: passed on as it is


@pytest.mark.parametrize("shape", [(1, 6), (6,), (1, 1, 6)])
def test_a_lone_row_is_multiplied_beside_a_copy_of_itself(switches, shape):
    switches.module.configure(True, "cpu")
    weight = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    out = switches.ops.onednn_mm(weight, x, None)
    assert switches.calls == [(2, 6)]  # M = 2: the kernel every batched step takes
    assert out.shape == (*shape[:-1], 4)
    assert torch.allclose(out, x @ weight)


def test_several_rows_go_to_onednn_as_they_are(switches):
    switches.module.configure(True, "cpu")
    weight = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    assert torch.equal(switches.ops.onednn_mm(weight, x, None), x @ weight)
    assert switches.calls == [(3, 6)]


def test_a_vllm_without_onednn_mm_gets_a_warning_not_a_patch(switches, monkeypatch):
    monkeypatch.delattr(switches.ops, "onednn_mm")
    with pytest.warns(UserWarning, match="no oneDNN matmul"):
        switches.module.configure(True, "cpu")
    assert not hasattr(switches.ops, "onednn_mm")


def test_configure_off_on_the_cpu_stops_the_padding_it_turned_on(switches):
    switches.module.configure(True, "cpu")
    assert switches.module._state["pad_lone_rows"] is True
    switches.module.configure(False, "cpu")
    assert switches.module._state["pad_lone_rows"] is False


def test_an_engine_claiming_again_with_another_setting_is_no_conflict_with_itself(switches):
    class Engine:  # what claim() looks at: an open engine holds its vLLM instance
        def __init__(self) -> None:
            self._llm = object()

    engine = Engine()
    switches.module.claim(engine, True, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        switches.module.claim(engine, False, "cpu")
