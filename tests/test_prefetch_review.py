"""PreSTO exactness on an engine whose next-token law reads the WHOLE prefix.

The toy engine is a first-order Markov model: a suffix depends on its prefix only through
the last kept token. A prefetcher that served a node from a prefix agreeing with the node's
state only at its last token would still reproduce the sequential chain there, so the toy
exactness tests cannot see a Condition 1 check that is too weak. Here every position's
logits are a hash of the full prefix, so only a proposal generated from the node's own
prefix equals the sequential one. The schedules are the edge cases of a block: one
transition (K=1), one-token states, budgets larger than the transitions left, K=0.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import presto.prefetch.presto as presto_module
from presto.engines.base import Engine, SuffixRequest, SuffixResult
from presto.engines.token_sampling import TokenStats, request_generator
from presto.prefetch.allocation import ACCEPT, REJECT, AllocationProgram, PrefetchTree
from presto.prefetch.clairvoyant import ClairvoyantTraversal, TrajectoryRecorder
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.entropycut import EntropyCut
from presto.samplers.multitry import MultiTryMH
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey

PROMPT = (7, 8)


class HistoryEngine(Engine):
    """Logits at each position are seeded by a hash of the whole prefix (prompt included).

    Token 0 is an EOS, drawn often with these small vocabularies: the MH samplers' fixed
    horizon must ignore it (only ``stop_at_eos`` requests stop, and they never make one).
    """

    name = "history"
    eos_token_ids = frozenset({0})

    def __init__(self, vocab: int, scale: float) -> None:
        super().__init__()
        self.vocab, self.scale = vocab, scale

    def logits(self, prefix: tuple[int, ...]) -> np.ndarray:
        return self.scale * np.random.default_rng(zlib.crc32(repr(prefix).encode())).normal(size=self.vocab)

    def _generate(self, requests: list[SuffixRequest]) -> list[SuffixResult]:
        results = []
        for request in requests:
            stats = TokenStats(request.num_new_tokens, len(request.extra_temperatures))
            rng, prefix = request_generator(request.seed), list(request.prefix)
            length = request.num_new_tokens
            for position in range(request.num_new_tokens):
                logits = self.logits(tuple(prefix))
                prefix.append(
                    stats.draw(position, logits, request.temperature, request.extra_temperatures, rng.random())
                )
                if request.stop_at_eos and prefix[-1] in self.eos_token_ids:
                    length = position + 1
                    break
            full = stats.result()
            results.append(SuffixResult(*(values[:length] for values in vars(full).values())))
        return results


def kernels(alpha: float, tau: float):
    return {
        "powermh": PowerMH(alpha, tau),
        "entropycut": EntropyCut(alpha, tau, beta=4.0, uniform_mix=0.1),
        "entropycut_pure": EntropyCut(alpha, tau, beta=2.0, uniform_mix=0.0),
        "multitry": MultiTryMH(alpha, tau, num_candidates=2, temperatures=(0.5, 1.0)),
    }


SCHEDULES = [
    BlockSchedule(1, 1, 1),  # one token, one transition
    BlockSchedule(3, 1, 4),  # one-token states in the first block
    BlockSchedule(6, 3, 7),
    BlockSchedule(8, 8, 12),
    BlockSchedule(4, 2, 0),  # K = 0: extension only
]


def test_the_engine_reads_more_than_the_last_token():
    """Otherwise the exactness test below would be as blind as the toy engine's."""
    engine = HistoryEngine(vocab=3, scale=1.5)
    assert not np.allclose(engine.logits((0, 1, 2)), engine.logits((1, 1, 2)))
    # EOS (token 0) is common here; a stop_at_eos request (never an MH one) ends at the first.
    (full,), (stopped,) = (engine.generate([SuffixRequest((7,), 12, 1.0, 3, (), stop)]) for stop in (False, True))
    assert 0 in full.tokens.tolist()
    assert stopped.tokens.tolist() == full.tokens.tolist()[: full.tokens.tolist().index(0) + 1]


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "entropycut_pure", "multitry"])
@pytest.mark.parametrize(
    ("vocab", "scale", "alpha", "tau"),
    [(3, 1.5, 4.0, 0.25), (2, 4.0, 2.0, 0.5), (4, 0.3, 8.0, 1.0), (2, 1.0, 1.0, 1.0)],
)
def test_prefetched_chains_equal_sequential_chains_on_a_whole_prefix_engine(sampler, vocab, scale, alpha, tau):
    engine = HistoryEngine(vocab, scale)
    kernel = kernels(alpha, tau)[sampler]
    for schedule, seed in itertools.product(SCHEDULES, range(3)):
        key = ChainKey(seed, seed % 2, 0)
        recorder = TrajectoryRecorder()
        reference, reference_trace = run_chain(kernel, engine, recorder, PROMPT, key, schedule)
        assert len(reference_trace.accepts) == schedule.stages * schedule.steps
        assert reference.length == schedule.max_new_tokens  # EOS stops nothing
        rules = [(BreadthFirst(), n_pf) for n_pf in (1, 2, 3, 50)]
        if recorder.trajectory:
            rules.append((ClairvoyantTraversal(recorder.trajectory), 5))
        for rule, n_pf in rules:
            rounds = []
            stepper = PrefetchStepper(rule, n_pf, rounds.append, max_logged_nodes=500)
            state, trace = run_chain(kernel, engine, stepper, PROMPT, key, schedule)
            assert state.tokens.tolist() == reference.tokens.tolist(), (schedule, seed, rule.name, n_pf)
            assert trace.accepts == reference_trace.accepts
            np.testing.assert_array_equal(state.logp0, reference.logp0)
            np.testing.assert_array_equal(state.entropy, reference.entropy)
            # The logged tree's decided nodes are the walk, in order, with the chain's decisions.
            logged = []
            for record in rounds:
                decided = sorted((n for n in record["nodes"] if n["decided"]), key=lambda n: n["depth"])
                assert len(decided) == record["realized"] <= min(n_pf, record["depth_cap"])
                logged += [int(n["accepted"]) for n in decided]
            assert logged == trace.accepts


def test_a_last_token_condition_1_breaks_exactness_here(monkeypatch):
    """The power of the test above: a feasibility check that compares only the last kept
    token (which every toy-engine exactness test passes) parts the chains on this engine."""

    def last_token_only(kernel, root, state, cut, inputs):
        if cut and state.tokens[cut - 1] != root.tokens[cut - 1]:
            return False
        return not kernel.state_depends_cut or kernel.cut(state, inputs) == cut

    monkeypatch.setattr(presto_module, "walk_decides", last_token_only)
    # alpha = tau = 1 accepts every move, so walks go deep; two tokens make a last-token match common.
    engine, kernel, schedule = HistoryEngine(2, 1.0), PowerMH(1.0, 1.0), BlockSchedule(6, 6, 8)
    parted = 0
    for seed in range(30):
        key = ChainKey(seed, 0, 0)
        reference, _ = run_chain(kernel, engine, SequentialStepper(), PROMPT, key, schedule)
        state, _ = run_chain(kernel, engine, PrefetchStepper(BreadthFirst(), 6), PROMPT, key, schedule)
        parted += not np.array_equal(state.logp0, reference.logp0)
    assert parted > 0


def test_all_accept_chains_walk_the_whole_budget():
    """alpha = 1, tau = 1: the proposal is the target, every move is accepted, and a walk only
    stops at the budget, the depth cap, or a cut later than an accepted one (Condition 1)."""
    engine, kernel = HistoryEngine(3, 1.5), PowerMH(1.0, 1.0)
    schedule = BlockSchedule(6, 6, 9)
    for seed in range(5):
        rounds = []
        _, trace = run_chain(
            kernel, engine, PrefetchStepper(BreadthFirst(), 4, rounds.append), PROMPT, ChainKey(seed, 0, 0), schedule
        )
        assert trace.accepts == [1] * 9
        for record in rounds:
            cuts = [next(n["cut"] for n in record["nodes"] if n["depth"] == d) for d in record["requested_depths"]]
            # All accepted: the state keeps the root's tokens up to the last accepted cut, so the
            # walk reaches at least the first cut larger than its predecessor (Condition 1); an
            # accepted suffix that repeats the root's tokens can carry it further, never less far.
            condition_1 = next((d for d in range(1, len(cuts)) if cuts[d] > cuts[d - 1]), len(cuts))
            assert condition_1 <= record["realized"] <= len(cuts)


def test_discarded_requests_are_the_walk_stops_where_the_speculated_cut_failed():
    """Independent count from the sequential trajectory: a round whose walk stops at depth d
    (a requested one) discards its proposal when the chain's state there still holds the
    root's first c_d tokens but its own cut is not the speculated c_d; the next round then
    decides that same transition (same random inputs) from the realized state."""
    engine, kernel = HistoryEngine(3, 1.5), EntropyCut(4.0, 0.25, beta=4.0, uniform_mix=0.1)
    schedule, total = BlockSchedule(10, 5, 12), 0
    for seed in range(8):
        key = ChainKey(seed, 0, 0)
        recorder = TrajectoryRecorder()
        run_chain(kernel, engine, recorder, PROMPT, key, schedule)
        rounds = []
        _, trace = run_chain(
            kernel, engine, PrefetchStepper(BreadthFirst(), 6, rounds.append, 500), PROMPT, key, schedule
        )
        expected = 0
        for record, following in zip(rounds, [*rounds[1:], None], strict=True):
            stage, start, stop = record["stage"], record["transition"], record["realized"]
            if following is not None and following["stage"] == stage:
                assert following["transition"] == start + stop  # the next round resumes at the stop
            if stop not in record["requested_depths"]:
                continue
            root, state = recorder.trajectory[(stage, start)], recorder.trajectory[(stage, start + stop)]
            speculated = kernel.cut(root, key.decision(stage, start + stop))
            if state.shares_prefix(root, speculated):
                assert kernel.cut(state, key.decision(stage, start + stop)) != speculated  # why the walk stopped
                expected += 1
        assert trace.discarded_requests == expected
        total += expected
    assert total > 0, "no speculated cut failed: the discard path was not exercised"


def _subsets_value(tree: PrefetchTree, chosen: frozenset[int], h: np.ndarray) -> float:
    """Expected transitions of a walk that stops at the first node outside ``chosen``."""

    def walk(v: int) -> float:
        if v < 0 or v not in chosen:
            return 0.0
        return 1.0 + h[v] * walk(tree.accept_child[v]) + (1.0 - h[v]) * walk(tree.reject_child[v])

    return walk(0)


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_a_brute_force_written_from_the_definitions(seed):
    """Proposition 2 against every node subset, with Condition 1 checked on the cuts
    themselves (c' <= c along the path) and ancestor closure and the depth cap checked here,
    not with PrefetchTree.candidates."""
    rng = np.random.default_rng(seed)
    length = 6
    parents, branches, node_cut, request_cut, depth = [None], ["root"], [length], [int(rng.integers(length))], [0]
    frontier = [0]
    while frontier and len(parents) < 11:
        v = frontier.pop(0)
        for branch, cut in ((ACCEPT, request_cut[v]), (REJECT, node_cut[v])):
            if len(parents) < 11 and rng.random() < 0.85:
                parents.append(v)
                branches.append(branch)
                node_cut.append(cut)
                request_cut.append(int(rng.integers(length)))
                depth.append(depth[v] + 1)
                frontier.append(len(parents) - 1)
    expandable = [request_cut[v] <= node_cut[v] for v in range(len(parents))]
    tree = PrefetchTree.from_edges(parents, branches, expandable)
    h = rng.choice([0.0, 1.0, 0.3, 0.7], size=len(tree))

    def allowed(chosen: frozenset[int], cap: int) -> bool:
        for v in chosen:
            if depth[v] >= cap or request_cut[v] > node_cut[v]:
                return False
            if v and parents[v] not in chosen:
                return False
        return True

    subsets = [frozenset(s) for r in range(len(tree) + 1) for s in itertools.combinations(range(len(tree)), r)]
    for cap in (1, 2, 4):
        feasible = [s for s in subsets if allowed(s, cap)]
        program = AllocationProgram(tree, h, 5, cap)
        for budget in range(6):
            best = max(_subsets_value(tree, s, h) for s in feasible if len(s) <= budget)
            assert program.value(budget) == pytest.approx(best, abs=1e-12)
            chosen = program.selection(budget)
            assert allowed(chosen, cap) and len(chosen) <= budget
            assert _subsets_value(tree, chosen, h) == pytest.approx(best, abs=1e-12)
