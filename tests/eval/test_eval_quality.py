"""Log-likelihood and confidence (eq. 21-22): stored per-token values equal a fresh p0 pass."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from presto.engines.base import SuffixRequest
from presto.engines.toy import ToyEngine
from presto.eval.quality import rescore, state_quality, token_confidence, token_loglik
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.runner.run import sample_chain
from presto.samplers.chain import BlockSchedule
from presto.samplers.powermh import PowerMH
from presto.samplers.state import ChainState
from presto.tasks.toy import ToyTask
from tests.conftest import run_cli
from tests.test_cli import read_chains, toy_args


def test_statistics_by_hand():
    assert token_loglik([-1.0, -2.0, -3.0]) == pytest.approx(-2.0)
    assert token_confidence([0.5, 1.5]) == pytest.approx(-1.0)
    assert token_loglik([]) is None and token_confidence([]) is None
    assert token_confidence([0.1, float("nan")]) is None  # an engine without entropies on its rescoring path


def test_stored_statistics_equal_rescored_ones_and_rescoring_is_not_a_model_call(toy_table):
    engine = ToyEngine(toy_table)
    task = ToyTask({"num_prompts": 3})
    schedule = BlockSchedule(8, 4, 6)
    for problem in task.load():
        stepper = PrefetchStepper(BreadthFirst(), 4)
        record = sample_chain(engine, PowerMH(4.0, 0.25), stepper, task, problem, 0, 5, schedule, rescore=True)
        assert record["loglik_rescored"] == pytest.approx(record["loglik"], abs=1e-12)
        assert record["confidence_rescored"] == pytest.approx(record["confidence"], abs=1e-12)
        plain = sample_chain(
            engine, PowerMH(4.0, 0.25), PrefetchStepper(BreadthFirst(), 4), task, problem, 0, 5, schedule
        )
        assert "loglik_rescored" not in plain
        assert plain["model_calls"] == record["model_calls"]  # the rescoring pass added no model call
        assert sum(record["call_times_s"]) == pytest.approx(record["call_time_s"], abs=1e-12)
        assert len(record["call_times_s"]) == record["model_calls"]


def test_rescore_on_a_hand_made_sequence(toy_table):
    engine = ToyEngine(toy_table)
    tokens = np.array([0, 5, 5, 2])
    logp0, entropy = engine.score([], tokens)
    quality = rescore(engine, [], tokens)
    assert quality.loglik == pytest.approx(float(np.mean(logp0)), abs=1e-15)
    assert quality.confidence == pytest.approx(-float(np.mean(entropy)), abs=1e-15)
    calls = engine.stats.calls
    (result,) = engine.generate([SuffixRequest((), 4, 1.0, 3)])
    state = ChainState.empty().splice(0, result)
    stored = state_quality(state)
    fresh = rescore(engine, [], state.tokens)
    assert engine.stats.calls == calls + 1
    assert math.isclose(stored.loglik, fresh.loglik, abs_tol=1e-12)
    assert math.isclose(stored.confidence, fresh.confidence, abs_tol=1e-12)


def test_run_rescore_key_on_the_command_line(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "run.rescore=true", "traversal=sequential"))
    assert result.returncode == 0, result.stderr
    records = read_chains(run_dir)
    for record in records:
        assert abs(record["loglik_rescored"] - record["loglik"]) < 1e-12
        assert abs(record["confidence_rescored"] - record["confidence"]) < 1e-12
        assert record["model_calls"] == 2 * (1 + 6)  # 2 blocks: one extension and K=6 transitions each
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["loglik_rescored_mean"] == pytest.approx(summary["loglik_mean"], abs=1e-12)
    assert summary["confidence_rescored_mean"] == pytest.approx(summary["confidence_mean"], abs=1e-12)
    assert "loglik_rescored_mean" in result.stdout and "confidence_rescored_mean" in result.stdout  # printed too
    assert "notice: run.rescore" not in result.stderr  # the toy engine rescores entropies as well


def test_an_engine_that_cannot_rescore_entropies_says_so():
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    from presto.engines.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # the property reads one setting; no model needed
    engine.exact_logprobs = False
    assert "confidence_rescored" in engine.rescore_limits and "engine.exact_logprobs=true" in engine.rescore_limits
    engine.exact_logprobs = True
    assert engine.rescore_limits is None
