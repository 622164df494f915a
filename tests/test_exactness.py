"""PreSTO does not change the chain: BFS chains equal sequential chains token for token."""

from __future__ import annotations

import numpy as np
import pytest

from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table

SCHEDULES = [BlockSchedule(12, 4, 6), BlockSchedule(16, 16, 25), BlockSchedule(8, 2, 3)]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"n{s.max_new_tokens}B{s.block_size}K{s.steps}")
@pytest.mark.parametrize("alpha", [1.0, 4.0])
def test_bfs_equals_sequential_on_toy_engine(tmp_path, schedule, alpha):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=11))
    kernel = PowerMH(alpha=alpha, tau=1.0 / alpha)
    compared = 0
    for seed in range(40):
        key = ChainKey(seed, prompt=seed % 3, chain=seed % 2)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
        for n_pf in (1, 2, 5, 20):
            state, trace = run_chain(kernel, engine, PrefetchStepper(BreadthFirst(), n_pf), [], key, schedule)
            np.testing.assert_array_equal(state.tokens, reference.tokens)
            assert trace.accepts == reference_trace.accepts
            assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
            np.testing.assert_allclose(state.logp0, reference.logp0, rtol=0, atol=0)
            compared += 1
    assert compared == 160


def test_prefetch_uses_fewer_calls_and_respects_budget(tmp_path):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=2))
    kernel = PowerMH(alpha=4.0, tau=0.25)
    schedule = BlockSchedule(16, 16, 40)
    calls = {}
    for n_pf in (1, 5, 20):
        seen_budget = []

        def on_round(record, seen=seen_budget):
            seen.append(len(record["requested_depths"]))

        before = engine.stats.calls
        _, trace = run_chain(
            kernel, engine, PrefetchStepper(BreadthFirst(), n_pf, on_round), [], ChainKey(7, 0, 0), schedule
        )
        calls[n_pf] = engine.stats.calls - before
        assert max(seen_budget) <= n_pf
        assert len(trace.accepts) == 40
    assert calls[1] == 41  # one extension + one call per transition
    assert calls[20] < calls[5] < calls[1]


def test_rounds_log_feasible_nodes_against_their_own_state(tmp_path):
    """Each logged node's log A is recomputed from its own state; the realized path matches the chain."""
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=4, seed=5))
    kernel = PowerMH(alpha=2.0, tau=0.5)
    rounds = []
    _, trace = run_chain(
        kernel,
        engine,
        PrefetchStepper(BreadthFirst(), 6, rounds.append, 200),
        [],
        ChainKey(1, 0, 0),
        BlockSchedule(10, 10, 30),
    )
    realized = []
    for record in rounds:
        nodes = record["nodes"]
        by_id = {n["id"]: n for n in nodes}
        path = [n for n in nodes if n["decided"]]
        assert len(path) == record["realized"]
        realized += [int(n["accepted"]) for n in sorted(path, key=lambda n: n["depth"])]
        for node in nodes:
            if node["parent"] is not None:
                assert by_id[node["parent"]]["depth"] == node["depth"] - 1
            if node["feasible"]:
                assert node["log_accept"] <= 0.0
                assert node["eps_class"] in ("accept", "reject", "uncertain")
    assert realized == trace.accepts


def test_a_rule_that_plans_a_wrong_cut_is_stopped_not_followed(tmp_path):
    """A traversal's cut off by one would leave the kernel's cut law and the chain would silently part."""

    class OffByOne(BreadthFirst):
        def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
            plan = super().plan(kernel, root, inputs, depth_cap, budget, reusable)
            return {d: min(cut + 1, root.length - 1) for d, cut in plan.items()}

    engine = ToyEngine(write_toy_table(tmp_path / "table.json", vocab=3, seed=1))
    schedule = BlockSchedule(6, 6, 8)
    with pytest.raises(RuntimeError, match=r"planned depth \d+ at cut"):
        for chain in range(10):
            run_chain(PowerMH(2.0, 0.5), engine, PrefetchStepper(OffByOne(), 4), [], ChainKey(1, 0, chain), schedule)
