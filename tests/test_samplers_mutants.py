"""Mutation review of the MH kernels (powermh, entropycut, multitry, kernel, randomness, state).

Each test names the surviving mutant it kills (ids of the review, listed at the end of the file)
and checks the kernel against an independent reference: the module docstrings' formulas written
out here, or exact enumeration of the toy engine's sequences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from presto.config import ConfigError
from presto.engines.base import SuffixResult
from presto.engines.toy import ToyEngine
from presto.samplers.entropycut import EntropyCut, cut_law
from presto.samplers.multitry import MultiTryMH
from presto.samplers.state import ChainState
from tests.conftest import write_toy_table
from tests.test_multitry import MixtureModel, kernel_matrix
from tests.toy_model import FixedInputs, ToyModel

# --- entropycut.py: subnormal weights are kept ----------------------------------------------------


def test_a_subnormal_jump_weight_is_a_cut_of_positive_probability():
    """E8 (weights below the smallest normal double flushed to 0): the docstring keeps subnormal
    weights down to ~5e-324. Rises 1 and 2 at beta = 1030 weigh (1/2)**1030 ~ 8.7e-311 against 1,
    so with uniform_mix = 0 cut 1 has that probability, and u = 0 inverts to it (the smallest c
    with CDF(c) > 0), not to cut 3."""
    beta = 1030.0
    entropy = np.array([0.0, 1.0, 0.0, 2.0])
    expected = 0.5**beta
    assert 0 < expected < np.finfo(float).tiny
    law = cut_law(entropy, beta, 0.0)
    assert law[0] == 0 and law[2] == 0 and law[3] == 1.0
    assert law[1] == pytest.approx(expected, rel=1e-9, abs=0)
    kernel = EntropyCut(2.0, 0.5, beta=beta, uniform_mix=0.0)
    state = ChainState(np.arange(4), np.full(4, -1.0), np.full(4, -1.0), entropy, np.zeros((4, 0)))
    assert kernel.cut(state, FixedInputs(cut_uniform=0.0)) == 1
    assert kernel.log_cut_probability(state, 1) == pytest.approx(beta * math.log(0.5), rel=1e-12)


# --- multitry.py: the importance weights use alpha, not the extension temperature ----------------


@pytest.mark.parametrize(("alpha", "tau"), [(3.0, 1.0), (2.0, 0.8)])
def test_multitry_weights_use_alpha_when_tau_is_not_one_over_alpha(tmp_path, alpha, tau):
    """M1 (importance weights p0^(1/tau) / q_mix instead of p0^alpha / q_mix): every MultiTryMH test
    ran at tau = 1/alpha, where the two agree. MultiTryMH's docstring: tau only sets the block
    extension; the weight is p0(s)^alpha / q_mix(s). The enumerated one-step kernel (each decide()'s
    log A checked against the closed form) must satisfy detailed balance for p0^alpha."""
    model = ToyModel(ToyEngine(write_toy_table(tmp_path / "t.json", vocab=2, seed=4, scale=1.5)))
    mixture = MixtureModel(model, alpha=alpha)
    _, matrix = kernel_matrix(mixture, MultiTryMH(alpha, tau, num_candidates=2), 2)
    _, target = model.target(2, alpha=alpha)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    flow = target[:, None] * matrix
    np.testing.assert_allclose(flow, flow.T, rtol=0, atol=1e-12)


# --- multitry.py: decide() refuses a wrong number of suffixes -------------------------------------


@pytest.mark.parametrize("count", [2, 4, 1])
def test_multitry_decide_refuses_a_wrong_number_of_suffixes(count):
    """M2 (the count check dropped): with M = 2 decide() needs the 2M - 1 = 3 suffixes of its requests
    (M candidates, then M - 1 references). Given 2 or 4 it would split them into candidates and
    references at the wrong place and decide with a wrong reference set (given 1, a candidate short)."""

    def suffix(token: int) -> SuffixResult:
        return SuffixResult(np.array([token]), np.array([-1.0]), np.array([-1.0]), np.zeros(1), np.array([[-1.0]]))

    kernel = MultiTryMH(2.0, 0.5, num_candidates=2, temperatures=(1.0,))
    state = ChainState.empty(1).splice(0, suffix(0))
    with pytest.raises(ValueError, match="expects 3 suffixes"):
        kernel.decide(state, 0, [suffix(1 + i) for i in range(count)], FixedInputs())


# --- multitry.py: which uniform cuts, and which one accepts ---------------------------------------


def _one_token(logp0: float, logq: float, token: int):
    return SuffixResult(np.array([token]), np.array([logp0]), np.array([logq]), np.zeros(1), np.array([[logq]]))


@pytest.mark.parametrize(("cut_uniform", "accept_uniform", "accepted"), [(0.6, 0.4, True), (0.4, 0.6, False)])
def test_multitry_accepts_with_the_decisions_accept_uniform(cut_uniform, accept_uniform, accepted):
    """M5 (the acceptance compared with the cut uniform): for M = 1 and one temperature t = 1 the rule
    is plain MH with weight w = p0^alpha / q. Hand-built weights: log w(x) = 2 * (-1) + 1 = -1 and
    log w(y) = 2 * (-1 - ln 2 / 2) + 1 = -1 - ln 2, so A = 1/2 and the move is accepted exactly when
    the decision's accept uniform (not its cut uniform) is below 1/2."""
    kernel = MultiTryMH(2.0, 0.5, num_candidates=1, temperatures=(1.0,))
    state = ChainState.empty(1).splice(0, _one_token(-1.0, -1.0, 0))
    proposal = _one_token(-1.0 - math.log(2.0) / 2, -1.0, 1)
    inputs = FixedInputs(cut_uniform=cut_uniform, accept_uniform=accept_uniform)
    decision = kernel.decide(state, 0, [proposal], inputs)
    assert decision.log_accept == pytest.approx(-math.log(2.0), abs=1e-12)
    assert decision.accepted is accepted
    assert decision.state.tokens.tolist() == ([1] if accepted else [0])


def test_multitry_cuts_with_the_decisions_cut_uniform():
    """M17 (the cut drawn from the accept uniform): the docstring's cut is Unif{0..T-1} from the
    decision's cut uniform, c = floor(u * T) (PowerMH's law), whatever the accept uniform is."""
    kernel = MultiTryMH(2.0, 0.5, num_candidates=2, temperatures=(1.0,))
    state = ChainState.empty(1)
    for token in range(5):
        state = state.splice(token, _one_token(-1.0, -1.0, token))
    for u, v in ((0.05, 0.95), (0.45, 0.05), (0.95, 0.3)):
        assert kernel.cut(state, FixedInputs(cut_uniform=u, accept_uniform=v)) == math.floor(u * 5)


# --- entropycut.py: option checks -----------------------------------------------------------------


def test_an_infinite_beta_is_refused():
    """E16 (only NaN refused among non-finite betas): the check's contract is a finite number >= 0
    (with beta = inf every rise but the largest weighs 0, a law the docstring's d ** beta never
    defines)."""
    with pytest.raises(ConfigError, match=r"sampler\.beta must be a finite number >= 0"):
        EntropyCut(2.0, 0.5, beta=math.inf)


# --- The review's mutants -------------------------------------------------------------------------
#
# 41 hand mutants of samplers/{powermh,kernel,randomness,entropycut,multitry,state}.py, each applied
# alone to a clone and run against test_randomness, test_mutants_multitry, test_mutants_samplers_tree,
# test_mutants_review, test_tree_logging_review3, test_prefetch_review, test_exactness,
# test_entropycut, test_law and test_multitry (-x). 35 killed by existing tests, 5 only by this file,
# 1 equivalent. M5 and M17 were killed only by the statistical chain-law test (after ~2 minutes); the
# tests here kill them directly and deterministically.
#
#   P1 uniform cut by round(u * (T-1)), P3 T = 0 admitted: existing (test_law uniform cut).
#   P2 PowerMH gain at 1/tau, P4 alpha on the q ratio too, K1 log A clipped at 1, E2 fallback on
#   total >= 0, E3 uniform_mix weights swapped, E9 EntropyCut gain at 1/tau, E12 cut probability
#   read at c+1: existing (test_mutants_samplers_tree tau != 1/alpha). K4 proposals at 1/alpha:
#   existing (requests-carry-tau). E1 |jump|, E7 rises / their sum, E10 jump from H[0], E11 beta = 0
#   as 0 ** 0: existing (jump weights). E4 fallback index T, E5 fallback to the first cut: existing
#   (closed-interval support). K2 suffix seed ^ 1, E6 cut from 1 - u: existing (test_tree_logging_
#   review3 recomputation). K3 prompt dropped from the prefix, R2 extension tag 3, R3 suffix seed
#   < 2**62, R4 extension key (0, stage), M3 selection shifted by the min, S1 extra log q columns
#   reversed on splice: existing (test_mutants_review). R1 auxiliary key (transition, stage), M4
#   mixture = geometric mean, M7 last temperature never drawn, M8 logsumexp guard for -inf only, M9
#   selection with 1 - u: existing (test_mutants_multitry). E14 uniform_mix = 1 refused: existing
#   (test_entropycut documented law). M6 ratio inverted, M10 alpha on q_mix too, M11 candidate 0 in
#   place of the current suffix: existing (test_multitry detailed balance). M5 accept with the cut
#   uniform, M17 MTM cut from the accept uniform: existing (test_multitry chain law) and new here.
#
#   E8 (weights below the smallest normal double flushed to 0), E13 (cut probabilities below 1e-300
#       read as 0): new, subnormal-weight test. The docstring keeps subnormal weights; flushing
#       them changes the cut law and makes cuts the state can draw irreversible.
#   M1 (MultiTryMH weights p0^(1/tau) / q_mix): new, tau != 1/alpha test. Blind spot of every earlier
#       MultiTryMH test, all at tau = 1/alpha.
#   M2 (decide() without its suffix-count check): new, wrong-count test.
#   E16 (beta = inf admitted): new, infinite-beta test.
#   S2 (shares_prefix also requires equal lengths): equivalent. Its callers (traversal.py, presto.py,
#       tree.py) compare states of one block, which all hold the block's length.
