"""Tests that kill the mutants a hand mutation review of the samplers and the prefetch tree found surviving.

Ids of the review: E = samplers/entropycut.py, P = samplers/powermh.py, S = samplers/state.py,
T = prefetch/tree.py, TR = prefetch/traversal.py, SV = the speculate-and-validate count of
prefetch/presto.py, F = predictor/features.py. Each test names the mutants it kills; the full
list, with what killed each one and why the survivors are equivalent, is at the end of the file.
The tests check laws written out from the docstrings (the jump weights, the CDF inversion, the
kernel matrix by enumeration with tau != 1/alpha), documented invariants, and values recomputed
from the logged tree's own path, rather than how the code computes them.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from presto.engines.base import SuffixResult
from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, run_chain
from presto.samplers.entropycut import EntropyCut, entropy_jump_weights, invert_cut_cdf
from presto.samplers.multitry import MultiTryMH
from presto.samplers.powermh import PowerMH, uniform_cut
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import PROJECT_ROOT, write_toy_table
from tests.test_entropycut import reference_matrix
from tests.toy_model import FixedInputs, ToyModel

# --- samplers/entropycut.py: the jump weights and the CDF inversion ------------------------------


def docstring_weights(entropy, beta: float) -> np.ndarray:
    """w_c of the module docstring: d_c ** beta for a rise d_c = H[c] - H[c-1] > 0, else 0; w_0 = 0."""
    weights = [0.0]
    for c in range(1, len(entropy)):
        rise = entropy[c] - entropy[c - 1]
        weights.append((1.0 if beta == 0 else rise**beta) if rise > 0 else 0.0)
    return np.array(weights)


@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0, 4.0])
def test_the_jump_weights_are_the_documented_weights_up_to_one_factor(beta):
    """E4 (`not top > 0` -> `not top >= 0`: the all-zero case no longer short-cut): a profile that
    never rises has w_c = 0 for every c, not 0/0 = NaN. Otherwise the weights are the docstring's
    w_c divided by the largest rise to the beta (one positive factor: the law is unchanged)."""
    profiles = [
        [1.0, 1.0, 1.0, 1.0],  # flat
        [3.0, 2.0, 2.0, 0.5],  # falling
        [0.5, 1.5, 1.0, 3.0],  # rises of 1 and 2
        [0.0, 0.25, 0.25, 0.75, 0.5],
        [2.0],
    ]
    for entropy in profiles:
        expected = docstring_weights(entropy, beta)
        weights = entropy_jump_weights(np.array(entropy), beta)
        assert weights.shape == (len(entropy),) and not np.isnan(weights).any()
        if expected.sum() == 0:
            np.testing.assert_array_equal(weights, 0.0)
        else:
            scale = 1.0 if beta == 0 else max(np.diff(entropy)) ** beta
            np.testing.assert_allclose(weights * scale, expected, rtol=1e-14, atol=0)


def docstring_inversion(weights: np.ndarray, uniform: float) -> int:
    """min{c : CDF(c) > u * CDF(T-1)} with plain Python sums (for u < 1 it always exists)."""
    total = sum(float(w) for w in weights)
    running = 0.0
    for c, w in enumerate(weights):
        running += float(w)
        if running > uniform * total:
            return c
    raise AssertionError("no cut: u * total >= total")


def test_the_cdf_inversion_is_the_documented_one_for_unnormalized_laws():
    """E14 (`u * CDF(T-1)` -> `u`: fine only for a law that sums to 1): invert_cut_cdf inverts the
    CDF of any nonnegative weights (its docstring compares with u * CDF(T-1)); on integer weights
    every partial sum is exact, so the cut is the docstring's, with the frequencies w_c / sum w."""
    for weights in ([1.0, 0.0, 3.0], [0.0, 2.0, 0.0, 6.0, 0.0], [5.0], [0.5, 0.25, 0.25]):
        law = np.array(weights)
        grid = (np.arange(800) + 0.5) / 800
        cuts = [invert_cut_cdf(law, float(u)) for u in grid]
        assert cuts == [docstring_inversion(law, float(u)) for u in grid]
        np.testing.assert_allclose(np.bincount(cuts, minlength=law.size) / grid.size, law / law.sum(), atol=1e-12)
        assert invert_cut_cdf(law, 0.0) == int(np.flatnonzero(law)[0])


@pytest.mark.parametrize("law", [[0.5, 0.5, 0.0], [0.2, 0.0, 0.8, 0.0, 0.0], [0.0, 1.0]])
def test_a_cut_is_in_the_laws_support_for_every_uniform_in_the_closed_interval(law):
    """E15 (the u * total == total fallback takes cut T-1 instead of the last cut with mass) and P3
    (uniform_cut without its clamp at T-1): at u = 1 no c has CDF(c) > u * CDF(T-1), and the cut
    must still be one the law can draw: for EntropyCut never a cut of probability zero (its
    docstring), for PowerMH a cut in {0, ..., T-1}."""
    law = np.array(law)
    for uniform in (0.0, 0.5, 1.0 - 2.0**-53, 1.0):
        cut = invert_cut_cdf(law, uniform)
        assert 0 <= cut < law.size and law[cut] > 0, (uniform, cut)
    assert invert_cut_cdf(law, 1.0) == int(np.flatnonzero(law)[-1])
    for length in (1, 2, 5, 7):
        assert {uniform_cut(length, u) for u in (0.0, 1.0 - 2.0**-53, 1.0)} <= set(range(length))
        assert uniform_cut(length, 1.0) == length - 1


def test_the_kernels_default_options_are_the_shipped_configs():
    """E27 (DEFAULT_UNIFORM_MIX changed): options missing from a sampler YAML take the kernel's
    defaults (build_kernel), which must be the values conf/sampler/entropycut.yaml ships (the
    paper's), so a user YAML that omits a key samples the same chain as the shipped one."""
    from presto.config import SamplerSettings
    from presto.samplers import build_kernel

    shipped = OmegaConf.load(PROJECT_ROOT / "conf" / "sampler" / "entropycut.yaml")
    kernel = build_kernel(SamplerSettings("entropycut", 4.0, 0.25, 8, 8, 2, {}))
    assert (kernel.beta, kernel.uniform_mix) == (float(shipped.beta), float(shipped.uniform_mix))


# --- samplers/entropycut.py and powermh.py: the one-step kernel with tau != 1/alpha ----------------


def enumerated_matrix(model: ToyModel, kernel, length: int, tau: float) -> np.ndarray:
    """P(x -> y) from the kernel's own cut law and decide(), every (cut, suffix) enumerated."""
    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        current = model.state(x, tau=tau)
        law = kernel.cut_law(current) if isinstance(kernel, EntropyCut) else np.full(length, 1.0 / length)
        for c in np.flatnonzero(law > 0):
            c = int(c)
            for tail in itertools.product(range(model.vocab), repeat=length - c):
                suffix = model.suffix(x[:c] + tail, c, tau=tau)
                decision = kernel.decide(current, c, [suffix], FixedInputs())
                proposed = law[c] * math.exp(suffix.logq.sum())
                move = proposed * math.exp(decision.log_accept)
                matrix[index[x], index[x[:c] + tail]] += move
                matrix[index[x], index[x]] += proposed - move
    return matrix


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> ToyModel:
    return ToyModel(ToyEngine(write_toy_table(tmp_path_factory.mktemp("mut") / "t.json", vocab=3, seed=9, scale=1.2)))


@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "entropycut_pure"])
@pytest.mark.parametrize(("alpha", "tau"), [(2.0, 0.8), (3.0, 1.0)])
def test_the_kernel_is_exact_when_tau_is_not_one_over_alpha(model, sampler, alpha, tau):
    """E28 and P16 (the MH ratio summed from c + 1, not from the first resampled token c): at
    tau = 1/alpha the first resampled token's terms cancel exactly (its q_tau is p0^alpha
    renormalized over the shared context), so every test at alpha = 2, tau = 1/2 or alpha = 4,
    tau = 1/4 is blind to it. With tau != 1/alpha the enumerated kernel must equal the docstring's
    P(x -> y) = p_x(c) q_tau(y[c:] | x[:c]) A_c(x, y) and satisfy detailed balance for p0^alpha."""
    beta, mix = {"powermh": (4.0, 1.0), "entropycut": (4.0, 0.1), "entropycut_pure": (2.0, 0.0)}[sampler]
    kernel = PowerMH(alpha, tau) if sampler == "powermh" else EntropyCut(alpha, tau, beta=beta, uniform_mix=mix)
    for length in (2, 3):
        matrix = enumerated_matrix(model, kernel, length, tau)
        _, reference = reference_matrix(model, length, beta, mix, alpha=alpha, tau=tau)
        np.testing.assert_allclose(matrix, reference, rtol=0, atol=1e-12)
        _, target = model.target(length, alpha=alpha)
        flow = target[:, None] * matrix
        np.testing.assert_allclose(flow, flow.T, rtol=0, atol=1e-12)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_the_requests_carry_tau_when_tau_is_not_one_over_alpha(model):
    """A1 (proposals and block extensions requested at 1/alpha, not at tau): every engine-backed
    chain-law test runs at tau = 1/alpha, where such a kernel samples the same chains, and the test
    above builds its suffixes itself. At alpha = 4, tau = 0.5: PowerMH and EntropyCut request their
    one proposal at tau (their docstrings: the suffix is resampled from q_tau); MultiTryMH requests
    its tries at temperatures of its own set (its docstring: no MH proposal uses tau); all three
    extend a block at tau (Kernel.extension_request)."""
    alpha, tau, temperatures = 4.0, 0.5, (0.25, 1.0)
    kernels = [
        PowerMH(alpha, tau),
        EntropyCut(alpha, tau),
        MultiTryMH(alpha, tau, num_candidates=2, temperatures=temperatures),
    ]
    for kernel in kernels:
        state = model.state((0, 2, 1, 1), kernel.extra_temperatures, tau=tau)
        asked = set()
        for transition in range(40):
            inputs = ChainKey(3, 0, 0).decision(0, transition)
            requests = kernel.requests([7], state, kernel.cut(state, inputs), inputs)
            asked |= {r.temperature for r in requests}
            assert all(r.extra_temperatures == kernel.extra_temperatures for r in requests)
        assert asked == (set(temperatures) if isinstance(kernel, MultiTryMH) else {tau}), kernel.name
        extension = kernel.extension_request([7], state, 3, seed=11)
        assert (extension.temperature, extension.num_new_tokens) == (tau, 3), kernel.name


# --- samplers/state.py --------------------------------------------------------------------------


def _suffix(tokens, logp0, entropy) -> SuffixResult:
    n = len(tokens)
    return SuffixResult(
        np.array(tokens, dtype=np.int64), np.array(logp0), np.array(logp0) * 2, np.array(entropy), np.zeros((n, 0))
    )


def test_the_state_summaries_are_means_over_every_token_one_token_states_included():
    """S11 (confidence 0 unless T > 1): loglik_mean is the mean of log p0 and confidence_mean the
    mean of -H over the sequence, for every T >= 1 (a chain with max_new_tokens=1 ends in such a
    state); an empty state summarizes to 0."""
    empty = ChainState.empty()
    assert (empty.loglik_mean(), empty.confidence_mean()) == (0.0, 0.0)
    one = empty.splice(0, _suffix([4], [-0.75], [1.25]))
    assert (one.loglik_mean(), one.confidence_mean()) == (-0.75, -1.25)
    three = one.splice(1, _suffix([1, 2], [-0.25, -2.0], [0.5, 2.25]))
    assert three.loglik_mean() == pytest.approx(-1.0) and three.confidence_mean() == pytest.approx(-4.0 / 3)


def test_a_spliced_state_keeps_the_documented_dtypes():
    """S14 (spliced tokens cast to int32): the record documents int64 token ids and float64
    statistics, in the empty state and after any splice."""
    state = ChainState.empty(2)
    for cut, tokens in ((0, [3, 1, 4]), (1, [5, 9]), (3, [2])):
        n = len(tokens)
        suffix = SuffixResult(np.array(tokens, dtype=np.int64), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros((n, 2)))
        state = state.splice(cut, suffix)
        assert state.tokens.dtype == np.int64
        assert {a.dtype for a in (state.logp0, state.logq, state.entropy, state.logq_extra)} == {np.dtype(np.float64)}
    assert state.tokens.tolist() == [3, 5, 9, 2] and state.logq_extra.shape == (4, 2)


# --- prefetch/tree.py: the logged tree against its own path ---------------------------------------


class _RootsBreadthFirst(BreadthFirst):
    """BFS, keeping each round's root (observe_round hears of it before the round is logged)."""

    def __init__(self) -> None:
        self.roots: list[ChainState] = []

    def observe_round(self, realized, states=()):
        self.roots.append(states[0])


def logged_rounds(table: Path, kernel, budget: int, max_nodes: int, seeds=range(3)):
    """(key, round record, root state) of BFS runs on a toy table: n = 12 in two blocks, K = 8."""
    engine, out = ToyEngine(table), []
    for seed in seeds:
        key, rule, rounds = ChainKey(seed, 1, 0), _RootsBreadthFirst(), []
        stepper = PrefetchStepper(rule, budget, rounds.append, max_nodes)
        run_chain(kernel, engine, stepper, [], key, BlockSchedule(12, 6, 8))
        assert len(rule.roots) == len(rounds)
        out += [(key, record, root) for record, root in zip(rounds, rule.roots, strict=True)]
    return out


@pytest.fixture(scope="module")
def tree_table(tmp_path_factory) -> Path:
    return write_toy_table(tmp_path_factory.mktemp("tree") / "t.json", vocab=5, seed=2, scale=2.0)


TREE_KERNELS = {"powermh": PowerMH(4.0, 0.25), "entropycut": EntropyCut(4.0, 0.25)}


@pytest.mark.parametrize("sampler", sorted(TREE_KERNELS))
@pytest.mark.parametrize("max_nodes", [1, 3, 6])
def test_past_the_node_cap_only_the_realized_path_is_logged(tree_table, sampler, max_nodes):
    """T16 (`len(nodes) >= max_nodes` -> `>`): run.max_logged_nodes is the number of tree nodes a
    round writes, the realized path always kept: every node after the first max_nodes is one the
    walk reached, and none the walk reached is missing."""
    over = 0
    for _, record, _ in logged_rounds(tree_table, TREE_KERNELS[sampler], 5, max_nodes):
        nodes = record["nodes"]
        assert all(node["reached"] for node in nodes[max_nodes:]), [n["reached"] for n in nodes]
        visited = record["realized"] + (record["realized"] < record["depth_cap"])
        assert sum(node["reached"] for node in nodes) == visited
        over += len(nodes) > max_nodes
    assert over > 0, "the cap never bound"


@pytest.mark.parametrize("sampler", sorted(TREE_KERNELS))
def test_every_node_carries_its_own_paths_features_and_transition(tree_table, sampler):
    """T26 (transition_offset one too large), T27 and T28 (an unrequested node logged with the root's
    length as its cut index, or with no accepts): recomputed from the node's path alone, each node
    (requested or not) logs its depth, its cut index c_i (T at the root; an acceptance child takes
    its parent's request cut, a rejection child its parent's c_i) and the accepts on its path; and a
    node at depth d decides transition ``transition + transition_offset`` = k + d, whose cut from
    the root is the node's requested cut."""
    kernel = TREE_KERNELS[sampler]
    unrequested = 0
    for key, record, root in logged_rounds(tree_table, kernel, 2, 200):
        by_id = {node["id"]: node for node in record["nodes"]}
        path: dict[int, tuple[int, int, int]] = {}  # id -> (depth, c_i, accepts)
        for node in record["nodes"]:
            if node["parent"] is None:
                depth, node_cut, accepts = 0, root.length, 0
            else:
                parent = by_id[node["parent"]]
                p_depth, p_cut, p_accepts = path[parent["id"]]
                depth = p_depth + 1
                if node["branch"] == "accept":
                    node_cut, accepts = parent["cut"], p_accepts + 1
                else:
                    node_cut, accepts = p_cut, p_accepts
            path[node["id"]] = (depth, node_cut, accepts)
            features = node["features"]
            assert (node["depth"], features["depth"]) == (depth, depth)
            assert (features["parent_cut"], features["accepts_on_path"]) == (node_cut, accepts), node
            assert node["transition_offset"] == depth
            decision = key.decision(record["stage"], record["transition"] + node["transition_offset"])
            if node["requested"]:
                assert node["cut"] == kernel.cut(root, decision)
            else:
                unrequested += 1
    assert unrequested > 0, "no unrequested node was logged"


# --- prefetch/traversal.py ----------------------------------------------------------------------


def test_a_rule_without_options_refuses_any_key_it_is_built_with():
    """TR7 (BreadthFirst.from_options without its key check): "rules without keys take none", and
    a key given to one is a one-line ConfigError naming it. config.validate checks a run's own
    traversal as well, but a caller that builds rules directly (scripts/benchmark.py, for each
    rule it compares) has only from_options to refuse a key the rule would ignore."""
    from presto.config import ConfigError

    assert isinstance(BreadthFirst.from_options({}), BreadthFirst)
    with pytest.raises(ConfigError, match=r"^traversal\.predictor is not a key of traversal=bfs"):
        BreadthFirst.from_options({"predictor": None})


# --- predictor/features.py ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", [None, (), []])
def test_a_predictor_with_no_feature_is_refused(spec):
    """F7x (the empty-selection check dropped: () returned, and training went on with a featureless
    model) and F17 (None read as every feature set): the selection must name at least one feature
    or feature set, and naming none is a ValueError that says so."""
    from presto.predictor.features import resolve_features

    with pytest.raises(ValueError, match="at least one feature"):
        resolve_features(spec)


# --- The review's mutants -------------------------------------------------------------------------
#
# 131 hand mutants, each applied alone to a copy of src/presto and run against the tests that import
# the module (subprocess CLI and script tests in a full copy of the repository). "existing" names the
# first existing test that failed; "new" a test of this file; "equivalent" is argued below.
#
# samplers/entropycut.py (28: 22 existing, 5 new, 1 equivalent)
#   E1 jump sign, E2 weights shifted to c-1, E3 T=2 forced uniform, E5 beta=0 indicator with >=,
#   E7 exponent beta+1, E10 mix not divided by T, E11 (1-m) factor dropped, E24 beta=0 refused:
#   existing (test_entropycut cut-law tests). E6 no scaling by the largest rise: existing (edge cases).
#   E8 zero fallback, E18 reverse cut read from x, E21 log(0) raised, E25 m=0 refused: existing
#   (test_mutants_review). E9 uniform term dropped, E12 weights / max, E16 cut from the accept
#   uniform, E17 forward/reverse cut ratio swapped, E22 state_depends_cut False, E23 accept with the
#   cut uniform: existing (test_tree_logging_review3). E13 side="left", E20 zero-probability cut
#   decided, E26 NaN beta admitted: existing (test_entropycut).
#   E4 (flat profile no longer short-cut: 0/0 weights): new, jump-weights test.
#   E14 (CDF compared with u, not u * total): new, unnormalized-law inversion test (equivalent
#       inside the kernel, whose law sums to 1 up to an ulp; the function's contract is general).
#   E15 (u * total == total falls back to T-1): new, closed-interval support test.
#   E27 (DEFAULT_UNIFORM_MIX 0.2): new, defaults = shipped YAML.
#   E28 (suffix ratio from c+1): new, tau != 1/alpha kernel test. Blind spot of every earlier test:
#       at tau = 1/alpha the first resampled token's q and p0^alpha terms cancel exactly.
#   E19 (no early -inf when p_y(c) = 0): equivalent. The sum is then -inf, or NaN when the suffix
#       ratio is +inf, and metropolis_accept maps NaN to log A = -inf: the same rejected decision.
#
# samplers/powermh.py (16: 14 existing, 1 new, 1 equivalent)
#   P1 never cuts T-1: existing (test_law). P2 T=1 refused, P13 cut law on T-1: existing
#   (test_prefetch_review). P4 reverse q from c+1, P5 q ratio inverted, P6 alpha dropped, P8 reverse
#   q from the proposal, P9 states swapped, P11 accept with the cut uniform, P12 Decision.proposal =
#   state, P14 current p0 from c+1, P15 forward q without its last token: existing
#   (test_tree_logging_review3). P10 cut from the accept uniform: existing (test_law chi-square).
#   P16 (whole ratio from c+1): existing (test_mutants_review, incidentally) and new (tau != 1/alpha).
#   P3 (no clamp at T-1): new, closed-interval support test (u = 1 gave cut T).
#   P7 (p0 gain summed over the whole states): equivalent. proposal = state.splice(c, ...) holds the
#       state's first c values bit for bit, so the prefix terms cancel (to rounding); the sequential
#       chain and every traversal call the same function, and stored log p0 are finite.
#
# samplers/state.py (14: 11 existing, 2 new, 1 equivalent)
#   S1 entropy not spliced, S2 extra log q sliced at T - |suffix|, S3 log q from log p0, S4 prefix
#   check without the last kept token, S9 empty state without extra columns, S13 log p0 from log q:
#   existing (test_mutants_review). S5 last-token-only prefix check: existing
#   (test_tree_logging_review3). S6 first token not compared: existing (test_exactness). S7 sum
#   for mean, S8 confidence sign, S12 mean without the first token: existing (eval/test_eval_quality).
#   S11 (one-token state's confidence 0): new, state summaries test.
#   S14 (spliced tokens int32): new, documented dtypes test.
#   S10 (length from log p0): equivalent: every constructor builds arrays of one length.
#
# prefetch/tree.py (33: 27 existing, 4 new, 2 equivalent)
#   T1-T9, T11 (statistics and features: signs, bounds, cut 0, mean normalization, cut/gap/parent
#   fractions, statistics of the node's state instead of the root's), T12/T13 epsilon boundaries,
#   T14/T15 reached/decided bounds, T17 nodes at the depth cap, T18-T22 child cut/accepts/state,
#   T23/T24 EntropyCut's cut re-check dropped or read from the root, T25 EPSILON, T29 value at c-1,
#   T30 reached ignores the last branch, T31 Condition 1 dropped, T32 accepted = (A == 1): existing
#   (test_tree_logging_review3).
#   T16 (one node too many past the cap): new, node-cap test.
#   T26 (transition_offset + 1), T27 (unrequested node's c_i = T), T28 (unrequested node's accepts
#       0): new, path features test (review3 skipped the features of unrequested nodes).
#   T10, T33 (root.length instead of max(root.length, 1)): equivalent: they differ only for an
#       empty root, and no decision is taken on a state with T = 0 (both cut laws refuse it).
#
# prefetch/traversal.py (13: 10 existing, 1 new, 2 equivalent)
#   TR1 prefix check without the last token, TR2 no check, TR3 cut re-check from the root, TR4 the
#   re-check's condition inverted, TR6 every depth at depth 0's cut, TR12 a deferred node decided for
#   EntropyCut, TR13 BFS plans past the cap: existing (test_prefetch_review). TR5 BFS one depth short:
#   existing (test_tree_logging_review3). TR8 registry `in` forgets lazy rules: existing (test_cli,
#   subprocess). TR9 names() without lazy rules: existing (test_scripts_review).
#   TR7 (from_options without its key check): new, rule-without-options test.
#   TR10 (lazy rule not cached): equivalent: importlib caches the module, the class is the same.
#   TR11 (unknown-name guard dropped): equivalent: `self._lazy[name]` raises the same KeyError(name).
#
# prefetch/presto.py, speculate and validate (7: 5 existing, 2 equivalent)
#   SV1 count not incremented, SV2 deferred (not discarded) stops counted, SV4 every stop counted
#   for EntropyCut, SV6 a depth missing from the plan counted: existing (test_prefetch_review's
#   independent discard count). SV5 walk validated against the root: existing (test_prefetch_review).
#   SV3 (state_depends_cut dropped from the count's condition): equivalent: for a cut law that does
#       not read the state, walk_decides fails only when the prefix is not shared, so the count's
#       other conjunct is False whenever it is reached.
#   SV7 (a depth-0 discard counted twice): equivalent: depth 0 never fails walk_decides (the state is
#       the root, and the stepper refuses a plan whose depth-0 cut is not the root's own).
#
# Audit mutants (found after the review; A = samplers/kernel.py)
#   A1 (Kernel.requests and extension_request at 1/alpha instead of tau): new, requests-carry-tau
#       test. Every earlier test passed it: the engine-backed chain-law tests run at tau = 1/alpha,
#       and the tau != 1/alpha kernel test builds its suffixes without requests().
#   MultiTryMH's tries drawn at one temperature per decision, round-robin from a random start, or
#       references at the candidates' temperatures: test_multitry's independent-uniform-draws test
#       (each try's marginal is uniform under all three, so the pooled marginal was blind).
#
# predictor/features.py (20: 15 existing, 2 new, 3 equivalent)
#   F1 class order, F9/F10 epsilon boundaries, F20 null feature not named: existing
#   (test_tree_logging_review3). F2/F3/F16 feature sets short or wrong, F5 duplicates kept: existing
#   (test_predictor). F4x cut set reads c_i, F13 set names not expanded: existing
#   (test_predictor_review2). F6x a string split into letters: existing (test_predictor_inputs).
#   F11 epsilon 0 admitted, F12 null A = 1, F18 log A not clipped: existing (test_mutants_predictive).
#   F19 a missing feature read as 0: existing (test_oracle_bound_script, subprocess).
#   F7x (empty selection admitted), F17 (None selects every set): new, no-feature test.
#   F8 (an unknown name also appended): equivalent: the ValueError after the loop is raised anyway.
#   F14 (@cache dropped): equivalent: a pure function of no argument.
#   F15 (probe at cut 0): equivalent: node_features' keys do not depend on its arguments.
