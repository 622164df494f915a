"""Requests that stop at EOS (the baselines'): a prefix of the full-length answer, and less decoding.

A ``stop_at_eos`` request returns its tokens up to and including the first EOS, with the
very tokens and statistics of the first positions of the same request run to full length
(the MH samplers' fixed horizon, which must stay as it is). The toy engine has no EOS, so
the tests give it one; the hf engine's tiny model gets one more EOS id, a token its
full-length answers are known to contain, so that every answer stops early.
"""

from __future__ import annotations

import numpy as np
import pytest

from presto.engines.base import SuffixRequest, SuffixResult
from presto.engines.toy import ToyEngine
from tests.conftest import write_toy_table

EOS = 2
FIELDS = ("tokens", "logp0", "logq", "entropy", "logq_extra")


class EosToyEngine(ToyEngine):
    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS})


def table(tmp_path):
    return write_toy_table(tmp_path / "table.json", vocab=4, seed=5, scale=1.0)


@pytest.fixture
def toy(tmp_path) -> EosToyEngine:
    return EosToyEngine(table(tmp_path))


def first_eos_length(tokens: np.ndarray, eos) -> int:
    hits = np.flatnonzero(np.isin(tokens, sorted(eos)))
    return int(hits[0]) + 1 if hits.size else len(tokens)


def assert_prefix_of(stopped: SuffixResult, full: SuffixResult, length: int) -> None:
    """``stopped`` is the first ``length`` positions of ``full``, bit for bit."""
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(stopped, name), getattr(full, name)[:length], err_msg=name)


def stopping(request: SuffixRequest) -> SuffixRequest:
    return SuffixRequest(
        request.prefix, request.num_new_tokens, request.temperature, request.seed, request.extra_temperatures, True
    )


def test_stop_at_eos_is_a_checked_bool_off_by_default():
    assert SuffixRequest((1,), 4, 1.0, 0).stop_at_eos is False
    assert SuffixRequest((1,), 4, 1.0, 0, stop_at_eos=True).stop_at_eos is True
    with pytest.raises(ValueError, match="stop_at_eos"):
        SuffixRequest((1,), 4, 1.0, 0, stop_at_eos=1)
    # A stopping request is another request: it is not merged with its full-length twin.
    assert SuffixRequest((1,), 4, 1.0, 0) != SuffixRequest((1,), 4, 1.0, 0, stop_at_eos=True)


def test_toy_stops_after_the_first_eos_with_the_full_answers_statistics(toy):
    full_requests = [SuffixRequest((), 12, 0.7, seed, (0.5, 1.0)) for seed in range(40)]
    full = toy.generate(full_requests)
    stopped = toy.generate([stopping(r) for r in full_requests])
    lengths = [first_eos_length(f.tokens, {EOS}) for f in full]
    assert min(lengths) < 12 and max(lengths) == 12  # some stop early, some never meet EOS
    for f, s, length in zip(full, stopped, lengths, strict=True):
        assert len(s.tokens) == length and s.logq_extra.shape == (length, 2)
        assert_prefix_of(s, f, length)
        if length < 12:
            assert s.tokens[-1] == EOS  # the EOS itself is returned, and nothing after it
    # Without stop_at_eos (the MH samplers' requests) generation runs past EOS.
    assert any(EOS in f.tokens[:-1].tolist() for f in full)
    assert all(len(f.tokens) == 12 for f in full)


def test_generated_tokens_count_what_was_produced(toy):
    requests = [SuffixRequest((), 12, 0.7, seed, stop_at_eos=True) for seed in range(40)]
    before = toy.stats.generated_tokens
    results = toy.generate(requests + requests[:5])  # duplicates are generated once
    produced = sum(len(r.tokens) for r in results[:40])
    assert toy.stats.generated_tokens - before == produced < 40 * 12
    before = toy.stats.generated_tokens
    toy.generate([SuffixRequest((), 12, 0.7, seed) for seed in range(40)])
    assert toy.stats.generated_tokens - before == 40 * 12


def test_an_engine_without_eos_ignores_stop_at_eos(tmp_path):
    plain = ToyEngine(table(tmp_path))
    request = SuffixRequest((), 10, 1.0, 3)
    (full,) = plain.generate([request])
    (stopped,) = plain.generate([stopping(request)])
    assert_prefix_of(stopped, full, 10)


def test_an_engine_that_runs_past_eos_for_a_stopping_request_is_caught(toy, tmp_path):
    class Careless(EosToyEngine):
        def _generate(self, requests):  # ignores stop_at_eos: the old behaviour
            return super()._generate(
                [SuffixRequest(r.prefix, r.num_new_tokens, r.temperature, r.seed) for r in requests]
            )

    careless = Careless(table(tmp_path))
    full = toy.generate([SuffixRequest((), 12, 0.7, seed) for seed in range(40)])
    seed = next(i for i, f in enumerate(full) if EOS in f.tokens[:-1].tolist())
    with pytest.raises(RuntimeError, match="stops at EOS"):
        careless.generate([SuffixRequest((), 12, 0.7, seed, stop_at_eos=True)])


# --- hf engine ------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["float64", "float32"])
def hf(request, tmp_path_factory):
    pytest.importorskip("torch")
    from presto.engines.hf import HFEngine
    from presto.models import make_tiny_model

    model_dir = make_tiny_model(tmp_path_factory.mktemp("tiny") / request.param, dtype=request.param, seed=1)
    return HFEngine(model_dir, dtype=request.param)


def hf_requests(hf) -> list[SuffixRequest]:
    """Prefixes of one sequence (one prefix group), different lengths, temperatures and seeds."""
    prompt = hf.encode_prompt([{"role": "user", "content": "Write a function that adds two numbers."}])
    sequence = (*prompt, *range(1000, 1030))
    cuts = [(len(prompt) + 3, 12, 0.5), (len(sequence), 8, 1.0), (len(prompt) + 20, 10, 0.7), (len(prompt), 12, 0.5)]
    return [SuffixRequest(sequence[:m], n, tau, 77 + m, (0.25, 1.0)) for m, n, tau in cuts]


def count_forwards(hf, monkeypatch) -> list[int]:
    calls = [0]
    forward = hf._forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(hf, "_forward", counted)
    return calls


def test_hf_stopped_rows_equal_the_full_rows_up_to_eos(hf, monkeypatch):
    requests = hf_requests(hf)
    full = hf.generate(requests)
    # One more EOS id: a token of the first answer (at position 4), so that row stops early.
    eos = hf.eos_token_ids | {int(full[0].tokens[4])}
    monkeypatch.setattr(hf, "_eos", eos)
    mixed = [stopping(r) for r in requests[:3]] + requests[3:]  # the last row runs to full length
    results = hf.generate(mixed)
    lengths = [first_eos_length(f.tokens, eos) for f in full[:3]] + [requests[3].num_new_tokens]
    assert lengths[0] <= 5
    for request, f, s, length in zip(mixed, full, results, lengths, strict=True):
        assert len(s.tokens) == length and s.logq_extra.shape == (length, 2)
        # Bit for bit even in float32: a stopped row stays in the batch until the call ends.
        assert_prefix_of(s, f, length)
        if request.stop_at_eos and length < request.num_new_tokens:
            assert int(s.tokens[-1]) in eos


def test_hf_call_ends_when_every_row_has_stopped(hf, monkeypatch):
    requests = hf_requests(hf)
    full = hf.generate(requests)
    calls = count_forwards(hf, monkeypatch)
    hf.generate(requests)
    full_forwards = calls[0]
    assert full_forwards == max(r.num_new_tokens for r in requests)  # one prefill, then one per later token
    # Every answer holds one of the added EOS ids by position 5.
    eos = hf.eos_token_ids | {int(f.tokens[2 + i]) for i, f in enumerate(full)}
    monkeypatch.setattr(hf, "_eos", eos)
    lengths = [first_eos_length(f.tokens, eos) for f in full]
    assert max(lengths) <= 6
    calls[0] = 0
    before = hf.stats.generated_tokens
    results = hf.generate([stopping(r) for r in requests])
    assert [len(r.tokens) for r in results] == lengths
    assert calls[0] == max(lengths) < full_forwards
    assert hf.stats.generated_tokens - before == sum(lengths) < sum(r.num_new_tokens for r in requests)
