"""The clairvoyant traversal (benchmark instrument): BFS's walks with only the depths they decide."""

from __future__ import annotations

import pytest

from presto.config import SamplerSettings
from presto.engines.toy import ToyEngine
from presto.prefetch.clairvoyant import ClairvoyantTraversal, TrajectoryRecorder
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers import build_kernel
from presto.samplers.chain import BlockSchedule, run_chain
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table

# Two blocks, so the trajectory is keyed across stages; a low tau makes accepted proposals
# repeat the root's tokens now and then, which keeps deeper depths decidable.
SCHEDULE = BlockSchedule(max_new_tokens=12, block_size=6, steps=12)
OPTIONS = {"powermh": {}, "entropycut": {"beta": 4.0, "uniform_mix": 0.1}, "multitry": {"num_candidates": 3}}


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
@pytest.mark.parametrize("seed", range(6))
def test_clairvoyant_requests_exactly_the_depths_bfs_walks_decide(tmp_path, sampler, seed):
    engine = ToyEngine(write_toy_table(tmp_path / "table.npz", vocab=3, seed=seed, scale=3.0))
    kernel = build_kernel(SamplerSettings(sampler, 2.0, 0.5, 12, 6, 12, OPTIONS[sampler]))
    key = ChainKey(seed, 0, 0)
    recorder = TrajectoryRecorder()
    sequential, sequential_trace = run_chain(kernel, engine, recorder, [], key, SCHEDULE)
    assert len(recorder.trajectory) == SCHEDULE.stages * SCHEDULE.steps

    walks = {}
    for name, rule in (("bfs", BreadthFirst()), ("clairvoyant", ClairvoyantTraversal(recorder.trajectory))):
        rounds = []
        state, trace = run_chain(kernel, engine, PrefetchStepper(rule, 8, rounds.append), [], key, SCHEDULE)
        # Exact: the same chain as the sequential one.
        assert state.tokens.tolist() == sequential.tokens.tolist()
        assert trace.accepts == sequential_trace.accepts
        assert trace.log_accepts == sequential_trace.log_accepts  # the same path, bit for bit
        walks[name] = rounds

    bfs, clairvoyant = walks["bfs"], walks["clairvoyant"]
    # Every depth the clairvoyant requests is decided, its walks are BFS's walks, and it never
    # requests more than BFS (strictly less wherever a BFS walk stopped short of its budget).
    assert [r["realized"] for r in clairvoyant] == [len(r["requested_depths"]) for r in clairvoyant]
    assert [r["realized"] for r in clairvoyant] == [r["realized"] for r in bfs]
    assert all(
        c["requested_depths"] == list(range(b["realized"])) and len(b["requested_depths"]) >= b["realized"]
        for c, b in zip(clairvoyant, bfs, strict=True)
    )


def test_clairvoyant_refuses_an_empty_trajectory():
    with pytest.raises(ValueError, match="recorded sequential trajectory"):
        ClairvoyantTraversal({})
