"""Host-side scale: PreSTO at the paper's sizes (n = 1024, K = 100, N_pf = 64, many stages) on the toy engine.

The chain must not depend on the size of a round (chains equal the sequential ones token for token,
with the same accept flags and log A), the run's outputs must agree with each other at those sizes
(summary.json, chains.jsonl, trees.jsonl), and a round must do each piece of its bookkeeping once:
the random inputs of a decision are drawn once per block, as the sequential stepper draws them
once per transition. Timings are in the review report, not asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from presto.config import validate
from presto.runner.outputs import read_jsonl
from presto.runner.run import build_sampler, build_traversal, make_stepper, run
from presto.samplers import randomness
from presto.samplers.chain import BlockSchedule, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import compose_run, toy_overrides, write_toy_table
from tests.toy_model import CachedToyEngine


def settings_of(table: Path, *overrides: str):
    return validate(compose_run(*toy_overrides(table), "run.progress=false", *overrides))


def chain_of(settings, engine, traversal_rounds: list | None = None):
    """One chain of ``settings`` on ``engine`` (sequential when the traversal is), and its trace."""
    kernel = build_sampler(settings.sampler)
    traversal = build_traversal(settings)
    stepper = make_stepper(settings, traversal, None if traversal_rounds is None else traversal_rounds.append)
    schedule = BlockSchedule(settings.sampler.max_new_tokens, settings.sampler.block_size, settings.sampler.steps)
    return run_chain(kernel, engine, stepper, [], ChainKey(0, 0, 0), schedule)


PAPER_BLOCK = ("sampler.max_new_tokens=1024", "sampler.block_size=1024", "sampler.steps=100", "budget.n_pf=64")


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_wide_rounds_at_paper_length_give_the_sequential_chain(tmp_path, sampler):
    """n = 1024 in one block, K = 100, N_pf = 64: BFS and the predictive rule (shipped predictor, cost model
    and reach calibration live) realize the sequential chain decision for decision."""
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    engine = CachedToyEngine(table)
    reference, reference_trace = chain_of(
        settings_of(table, f"sampler={sampler}", "traversal=sequential", *PAPER_BLOCK), engine
    )
    assert len(reference_trace.accepts) == 100 and 0 < sum(reference_trace.accepts) < 100
    for traversal in ("bfs", "predictive"):
        rounds: list = []
        state, trace = chain_of(
            settings_of(table, f"sampler={sampler}", f"traversal={traversal}", *PAPER_BLOCK), engine, rounds
        )
        np.testing.assert_array_equal(state.tokens, reference.tokens)
        assert trace.accepts == reference_trace.accepts
        assert trace.log_accepts == reference_trace.log_accepts
        assert sum(r["realized"] for r in rounds) == 100 == len(trace.accepts)
        assert max(len(r["requested_depths"]) for r in rounds) <= 64
        assert len(rounds) < 100  # the rounds are wide: some walk more than one transition


def run_dir_records(run_dir: Path):
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, read_jsonl(run_dir / "chains.jsonl"), read_jsonl(run_dir / "trees.jsonl")


@pytest.mark.parametrize("traversal", ["bfs", "predictive"])
def test_many_stages_with_a_budget_past_the_depth_cap_keep_every_output_consistent(tmp_path, traversal):
    """32 stages of B = 16 (n = 512), K = 12 < N_pf = 64, 1 prompt x 2 chains: the chains equal the sequential
    run's, and summary.json's figures are those of chains.jsonl, whose per-chain figures are those of
    trees.jsonl (one record per round, its decided nodes the chain's accept flags)."""
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    overrides = (
        *toy_overrides(table),
        "run.progress=false",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=512",
        "sampler.block_size=16",
        "sampler.steps=12",
        "budget.n_pf=64",
        "run.max_logged_nodes=8",
    )
    run(compose_run(*overrides, "traversal=sequential"), tmp_path / "sequential")
    run(compose_run(*overrides, f"traversal={traversal}"), tmp_path / traversal)
    _, reference, _ = run_dir_records(tmp_path / "sequential")
    summary, chains, trees = run_dir_records(tmp_path / traversal)
    stages, steps = 512 // 16, 12

    assert [(c["tokens"], c["accepts"], c["log_accepts"]) for c in chains] == [
        (c["tokens"], c["accepts"], c["log_accepts"]) for c in reference
    ]
    assert summary["chains"] == len(chains) == 2 and summary["complete"] is True
    assert summary["transitions"] == sum(c["transitions"] for c in chains) == 2 * stages * steps
    assert summary["model_calls"] == sum(c["model_calls"] for c in chains) == summary["engine_calls"]
    assert summary["prefetch_rounds"] == sum(c["rounds"] for c in chains) == len(trees)
    assert summary["acceptance_rate"] == pytest.approx(sum(sum(c["accepts"]) for c in chains) / (2 * stages * steps))
    for chain in chains:
        mine = [t for t in trees if t["chain"] == chain["chain"]]
        assert [t["round"] for t in mine] == list(range(chain["rounds"]))
        assert sorted({t["stage"] for t in mine}) == list(range(stages))
        assert sum(t["realized"] for t in mine) == chain["transitions"] == len(chain["accepts"])
        # A round whose proposals were all generated earlier in the block makes no call: the chain's calls
        # are the stages' extensions plus the rounds that called.
        assert stages + sum(t["model_call"] for t in mine) == chain["model_calls"] == len(chain["call_times_s"])
        decided = []
        for record in mine:
            assert len(record["requested_depths"]) <= min(64, record["depth_cap"])
            # at most run.max_logged_nodes nodes besides the realized path and the node where it stopped
            assert len(record["nodes"]) <= 8 + record["realized"] + 1
            path = sorted((n for n in record["nodes"] if n["decided"]), key=lambda n: n["depth"])
            assert [n["depth"] for n in path] == list(range(record["realized"]))
            decided += [int(n["accepted"]) for n in path]
        assert decided == chain["accepts"]


def counted_streams(monkeypatch) -> list[tuple]:
    """The key of every random stream the run builds (a SeedSequence and a PCG64 each), in order."""
    built: list[tuple] = []
    stream = randomness._stream

    def counting(*key):
        built.append(key)
        return stream(*key)

    monkeypatch.setattr(randomness, "_stream", counting)
    return built


def test_the_sequential_stepper_draws_each_decisions_inputs_once(tmp_path, monkeypatch):
    """The reference the next test holds PreSTO to: one stream per transition, one per block extension."""
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    built = counted_streams(monkeypatch)
    chain_of(settings_of(table, "traversal=sequential", *PAPER_BLOCK[:2], "sampler.steps=40"), CachedToyEngine(table))
    assert len(built) == 40 + 1
    assert len(set(built)) == len(built)


def test_a_block_draws_each_decisions_inputs_once(tmp_path, monkeypatch):
    """The plan, the cut check, the requests, the walk and the tree log of every round share one draw of
    a decision's random inputs (a SeedSequence and PCG64 stream, ~25 us each), for the whole block."""
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    built = counted_streams(monkeypatch)
    rounds: list = []
    chain_of(
        settings_of(table, "traversal=bfs", *PAPER_BLOCK[:2], "sampler.steps=40", "budget.n_pf=20"),
        CachedToyEngine(table),
        rounds,
    )
    planned = sum(len(r["requested_depths"]) for r in rounds)
    assert len(built) <= planned + 1  # each planned decision of a round once, and the block's extension
    assert len(set(built)) == len(built)  # and never again in a later round of the block
