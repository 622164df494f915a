"""Tests that kill the mutants a hand mutation review of the core modules found surviving.

Each test names the mutants it kills (ids of the review: K = samplers/kernel.py, C = chain.py,
R = randomness.py, M = multitry.py, PR = prefetch/presto.py, A = prefetch/allocation.py).
They check laws, exact equalities with the sequential chain or a reconstruction from the
engine, and the documented stream keys, rather than how the code computes them.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest

from presto.engines.base import SuffixRequest, SuffixResult
from presto.engines.toy import ToyEngine
from presto.prefetch.allocation import ACCEPT, REJECT, PrefetchTree
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.entropycut import EntropyCut
from presto.samplers.kernel import metropolis_accept
from presto.samplers.multitry import PROPOSAL_STREAM, SELECTION_STREAM, MultiTryMH, select_index
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import write_toy_table
from tests.test_prefetch_review import PROMPT, HistoryEngine, kernels
from tests.test_randomness import every_draw
from tests.toy_model import FixedInputs, ToyModel

ALPHA, TAU = 2.0, 0.5


# --- kernel.py: metropolis_accept -------------------------------------------------------------


@pytest.mark.parametrize("uniform", [0.0, 0.25, 1.0 - 2.0**-53])
def test_a_move_of_acceptance_zero_or_nan_is_never_accepted(uniform):
    """K1 (`uniform < exp(log A)` -> `<=`): A = 0 was accepted when the uniform is 0.0, a value
    rng.random() returns. K2 (a NaN ratio mapped to log A = 0 instead of -inf): every move whose
    ratio is undefined was accepted."""
    for log_ratio in (-math.inf, math.nan):
        assert metropolis_accept(log_ratio, uniform) == (False, -math.inf)
    assert metropolis_accept(0.0, uniform) == (True, 0.0)
    assert metropolis_accept(math.inf, uniform) == (True, 0.0)


def test_an_irreversible_entropycut_move_is_rejected_even_at_uniform_zero(tmp_path):
    """K1 at kernel level: detailed balance needs P(x -> y) = 0 whenever y cannot cut at c (its
    law gives c probability 0), whatever the acceptance uniform is."""
    model = ToyModel(ToyEngine(write_toy_table(tmp_path / "t.json", vocab=3, seed=9, scale=1.2)))
    kernel = EntropyCut(ALPHA, TAU, beta=4.0, uniform_mix=0.0)
    checked = 0
    for x in itertools.product(range(3), repeat=4):
        current = model.state(x)
        for c in np.flatnonzero(kernel.cut_law(current) > 0):
            for tail in itertools.product(range(3), repeat=4 - int(c)):
                y = x[: int(c)] + tail
                if kernel.cut_law(model.state(y))[c] > 0:
                    continue
                decision = kernel.decide(current, int(c), [model.suffix(y, int(c))], FixedInputs(accept_uniform=0.0))
                assert not decision.accepted and decision.log_accept == -math.inf
                assert decision.state is current
                checked += 1
    assert checked > 0


def test_a_powermh_move_with_an_undefined_ratio_is_rejected():
    """K2 at kernel level: a token of p0 probability 0 in both suffixes makes the p0 gain
    -inf - (-inf) = NaN; such a move is never accepted."""
    current = ChainState(
        np.array([1, 2]), np.array([-1.0, -math.inf]), np.array([-1.0, -1.0]), np.zeros(2), np.zeros((2, 0))
    )
    suffix = SuffixResult(np.array([0]), np.array([-math.inf]), np.array([-1.0]), np.zeros(1), np.zeros((1, 0)))
    for uniform in (0.0, 0.5):
        with np.errstate(invalid="ignore"):  # -inf - (-inf)
            decision = PowerMH(ALPHA, TAU).decide(current, 1, [suffix], FixedInputs(accept_uniform=uniform))
        assert not decision.accepted and decision.log_accept == -math.inf


# --- chain.py / kernel.py: block extensions ---------------------------------------------------


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_block_extensions_condition_on_the_whole_state_with_their_stage_seed(sampler):
    """K4 (extension prefix without the state's last token) and C2 (every block extended with
    stage 0's seed): with K = 0 a chain is its extensions alone, so it must equal the blocks
    generated one by one from prompt + everything so far, at tau, with each stage's own seed
    (a whole-prefix engine, so a prefix missing a token gives other tokens)."""
    engine = HistoryEngine(vocab=3, scale=1.5)
    kernel = kernels(4.0, 0.25)[sampler]
    for seed in range(4):
        key = ChainKey(seed, 1, 2)
        state, trace = run_chain(kernel, engine, SequentialStepper(), PROMPT, key, BlockSchedule(12, 3, 0))
        tokens: list[int] = []
        for stage in range(4):
            request = SuffixRequest(
                PROMPT + tuple(tokens), 3, kernel.tau, key.extension_seed(stage), kernel.extra_temperatures
            )
            (block,) = engine.generate([request])
            tokens += block.tokens.tolist()
        assert state.tokens.tolist() == tokens
        assert trace.accepts == []


class _RecordingSequential(SequentialStepper):
    """The sequential stepper, keeping the state of every decision (the one after each extension first)."""

    def __init__(self) -> None:
        self.states: list[ChainState] = []

    def before_decision(self, stage, transition, state, cut):
        self.states.append(state)


class _RecordingBreadthFirst(BreadthFirst):
    """BFS, keeping every state a prefetch round's walk went through."""

    def __init__(self) -> None:
        self.states: list[ChainState] = []

    def observe_round(self, realized, states=()):
        self.states += list(states)


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
@pytest.mark.parametrize("stepper", ["sequential", "bfs"])
def test_every_state_stores_its_own_tokens_statistics(tmp_path, sampler, stepper):
    """K4 again, through the invariant of state.py: in every state a chain goes through, each
    stored log p0, entropy, log q_tau (the extension's and the single-proposal samplers') and
    extra log q is the closed-form value of the state's own token given its own previous token."""
    table = write_toy_table(tmp_path / "t.json", vocab=4, seed=5, scale=1.5)
    engine, model = ToyEngine(table), ToyModel(ToyEngine(table))
    kernel = {
        "powermh": PowerMH(ALPHA, TAU),
        "entropycut": EntropyCut(ALPHA, TAU),
        "multitry": MultiTryMH(ALPHA, TAU, num_candidates=2, temperatures=(0.5, 1.0)),
    }[sampler]
    checked = 0
    for chain in range(6):
        rule = _RecordingBreadthFirst()
        step = _RecordingSequential() if stepper == "sequential" else PrefetchStepper(rule, 3)
        final, _ = run_chain(kernel, engine, step, [], ChainKey(3, 0, chain), BlockSchedule(9, 3, 4))
        for state in [*(step.states if stepper == "sequential" else rule.states), final]:
            expected = model.state(tuple(state.tokens.tolist()), kernel.extra_temperatures, TAU)
            np.testing.assert_allclose(state.logp0, expected.logp0, rtol=0, atol=1e-12)
            np.testing.assert_allclose(state.entropy, expected.entropy, rtol=0, atol=1e-12)
            np.testing.assert_allclose(state.logq_extra, expected.logq_extra, rtol=0, atol=1e-12)
            if sampler != "multitry":  # MultiTryMH's logq is at whichever temperature drew the token
                np.testing.assert_allclose(state.logq, expected.logq, rtol=0, atol=1e-12)
            checked += 1
    assert checked >= 6 * 12


# --- randomness.py: stream keys ---------------------------------------------------------------


def _stream(*words: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(words))))


@pytest.mark.parametrize(("stage", "transition"), [(0, 0), (2, 7)])
def test_decision_extension_and_auxiliary_streams_are_the_documented_keys(stage, transition):
    """R8 (prompt and chain swapped in the decision key), R3 (extension seed taken from the
    decision stream), R7 (the auxiliary purpose dropped from its key): each stream is keyed by
    (seed, prompt, chain, stage, transition, tag[, purpose]) with tags decision 0, extension 1,
    auxiliary 2, so recorded runs replay with the same random inputs."""
    key = ChainKey(11, 3, 5)
    decision = key.decision(stage, transition)
    rng = _stream(11, 3, 5, stage, transition, 0)
    expected = (float(rng.random()), int(rng.integers(2**63)), float(rng.random()))
    assert (decision.cut_uniform, decision.suffix_seed, decision.accept_uniform) == expected
    for purpose in (PROPOSAL_STREAM, SELECTION_STREAM):
        assert decision.auxiliary(purpose).random() == _stream(11, 3, 5, stage, transition, 2, purpose).random()
    assert key.extension_seed(stage) == int(_stream(11, 3, 5, stage, 0, 1).integers(2**63))


def test_the_streams_of_one_chain_share_no_random_word():
    """R7 (auxiliary purposes collapsed into one stream) and R3 (the extension seed drawn from the
    first word of decision (stage, 0), whose top 53 bits are that decision's cut uniform: the
    seed's top bits then equal the cut uniform's)."""
    key = ChainKey(2024, 0, 1)
    for stage in range(4):
        extension = key.extension_seed(stage)
        for transition in range(6):
            decision = key.decision(stage, transition)
            auxiliary = {float(decision.auxiliary(purpose).random()) for purpose in range(3)}
            assert len(auxiliary | {decision.cut_uniform, decision.accept_uniform}) == 5
            assert extension >> 10 != int(decision.cut_uniform * 2**53)


def test_wide_seeds_use_all_128_bits():
    """R5 (the fixed-width encoding keeps 3 words, 96 bits): seeds that differ only above bit 96
    shared every stream. The docstring promises 128-bit fields."""
    assert not every_draw(ChainKey(2**100 + 1, 0, 0)) & every_draw(ChainKey(2**99 + 1, 0, 0))
    assert not every_draw(ChainKey(2**127 + 7, 0, 0)) & every_draw(ChainKey(2**96 + 7, 0, 0))


# --- multitry.py: selection -------------------------------------------------------------------


def test_selection_never_picks_a_zero_weight_candidate():
    """M7 (CDF inverted with side='left'): at uniform 0.0 the first candidate was chosen even with
    weight 0. Picking i has probability w_i / sum w, so a zero weight is never picked."""
    log_weights = np.array([-np.inf, 0.0, -np.inf, math.log(3.0)])
    grid = [0.0, *((np.arange(400) + 0.5) / 400), 1.0 - 2.0**-53]
    picks = [select_index(log_weights, float(u)) for u in grid]
    assert all(np.isfinite(log_weights[i]) for i in picks)
    assert picks[0] == 1 and picks[-1] == 3
    np.testing.assert_allclose(np.bincount(picks[1:-1], minlength=4) / 400, [0, 0.25, 0, 0.75], atol=1 / 400)


@dataclass(frozen=True)
class _Stream:
    value: float

    def random(self) -> float:
        return self.value


@dataclass(frozen=True)
class _PurposeInputs(FixedInputs):
    """Decision inputs whose auxiliary streams differ by purpose (FixedInputs gives one value)."""

    def auxiliary(self, purpose: int):
        return _Stream(self.selection_uniform if purpose == SELECTION_STREAM else 1.0 - self.selection_uniform)


def test_the_selection_uniform_comes_from_the_selection_stream():
    """M9 (selection uniform drawn from PROPOSAL_STREAM, whose first word also picks the tries'
    temperatures): the docstring assigns it SELECTION_STREAM. Two candidates of equal weight:
    the selection uniform alone says which one is the proposal."""
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=2, temperatures=(1.0,))

    def suffix(token: int) -> SuffixResult:
        return SuffixResult(np.array([token]), np.array([-1.0]), np.array([-1.0]), np.zeros(1), np.array([[-1.0]]))

    state = ChainState.empty(1).splice(0, suffix(0))
    results = [suffix(1), suffix(2), suffix(3)]  # candidates 1 and 2, reference 3
    for uniform, token in ((0.1, 1), (0.9, 2)):
        decision = kernel.decide(state, 0, results, _PurposeInputs(selection_uniform=uniform))
        assert decision.proposal.tokens.tolist() == [token]


# --- prefetch/presto.py: plans a rule may not make, plans with gaps -------------------------


def test_a_rule_that_plans_past_the_depth_cap_is_stopped():
    """PR2 (`max(plan) >= depth_cap` -> `>`): a request for the transition after the block's last
    is a request the walk can never use; the stepper refuses such a plan like any other rule break."""

    class PastTheCap(BreadthFirst):
        def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
            plan = super().plan(kernel, root, inputs, depth_cap, budget, reusable)
            plan[depth_cap] = kernel.cut(root, inputs(depth_cap))
            return plan

    engine = HistoryEngine(vocab=3, scale=1.5)
    with pytest.raises(RuntimeError, match="outside the rules"):
        run_chain(
            PowerMH(ALPHA, TAU),
            engine,
            PrefetchStepper(PastTheCap(), 10),
            PROMPT,
            ChainKey(0, 0, 0),
            BlockSchedule(4, 4, 3),
        )


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_a_plan_with_a_gap_still_gives_the_sequential_chain(sampler):
    """PR10 (the walk `continue`s past a depth the plan lacks instead of stopping): the stepper
    accepts any plan holding depth 0; one that skips depth 1 must stop the walk there, or
    transition 2's decision is taken in place of transition 1's and the chain parts."""

    class SkipsDepthOne(BreadthFirst):
        def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
            plan = super().plan(kernel, root, inputs, depth_cap, budget, reusable)
            plan.pop(1, None)
            return plan

    engine = HistoryEngine(vocab=3, scale=1.5)
    kernel = kernels(4.0, 0.25)[sampler]
    schedule = BlockSchedule(8, 4, 6)
    for seed in range(4):
        key = ChainKey(seed, 0, 0)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), PROMPT, key, schedule)
        state, trace = run_chain(kernel, engine, PrefetchStepper(SkipsDepthOne(), 5), PROMPT, key, schedule)
        assert state.tokens.tolist() == reference.tokens.tolist()
        assert trace.accepts == reference_trace.accepts
        assert trace.log_accepts == reference_trace.log_accepts


# --- prefetch/allocation.py: I_max ------------------------------------------------------------


def _brute_force_candidates(tree: PrefetchTree, depth_cap: int) -> list[bool]:
    """I_max from its definition: v and all its strict ancestors expandable, depth(v) < cap."""
    out = []
    for v in range(len(tree)):
        chain, u = [v], v
        while tree.parent[u] >= 0:
            u = tree.parent[u]
            chain.append(u)
        out.append(tree.depth[v] < depth_cap and all(tree.expandable[a] for a in chain))
    return out


def test_candidates_exclude_nodes_below_a_deferred_node():
    """A3 (`mask[v] = ok`, the ancestor condition dropped): a node below a deferred (not
    expandable) node is no candidate. AllocationProgram skips it anyway (its parent's value is
    0), but scripts/oracle_bound.py sums reaching weights over ``candidates`` for shared-BFS."""
    tree = PrefetchTree.from_edges(
        [None, 0, 0, 1, 1, 2], ["root", ACCEPT, REJECT, ACCEPT, REJECT, ACCEPT], [True, False, True, True, True, True]
    )
    assert tree.candidates(5).tolist() == [True, False, True, False, False, True]
    assert tree.candidates(2).tolist() == [True, False, True, False, False, False]
    rng = np.random.default_rng(0)
    for _ in range(50):
        tree = PrefetchTree.from_edges([None], ["root"], [True])
        for _ in range(int(rng.integers(1, 15))):
            parent = int(rng.integers(len(tree)))
            free = [b for b, slots in ((ACCEPT, tree.accept_child), (REJECT, tree.reject_child)) if slots[parent] < 0]
            if free:
                tree.add_node(parent, free[int(rng.integers(len(free)))], bool(rng.random() < 0.7))
        for cap in (1, 2, 4, 10):
            assert tree.candidates(cap).tolist() == _brute_force_candidates(tree, cap)
