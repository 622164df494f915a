"""The toy engine's PowerMH chains follow the exact law of the uniform-cut kernel.

The law after each block is computed by enumerating every sequence over V tokens: the
block extension at tau, then K applications of the kernel matrix
P(x -> y) = sum_c 1/T q_tau(y_{c:} | x_{:c}) A(x, y; c) for y sharing x's first c tokens,
with the rejected mass on the diagonal. A chi-square test must accept that law for the
simulated chains and reject wrong ones (the target pi_alpha itself before convergence, and
the kernel that drops the proposal correction q(x|y)/q(y|x)). The chi-square cannot see
every wrong kernel (one that never cuts at T-1, or that drops one token of the reverse
proposal, is pi_alpha-invariant too, or close to the law after K steps), so PowerMH's own
cut() and decide() are also enumerated into the one-step matrix and compared with P exactly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from presto.engines.token_sampling import log_softmax
from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.powermh import PowerMH, uniform_cut
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table
from tests.toy_model import FixedInputs, ToyModel

VOCAB, N, K, ALPHA, TAU = 3, 4, 5, 2.0, 0.5
CHAINS = 3000


class ExactLaw:
    """Closed-form sequence probabilities of a toy table."""

    def __init__(self, engine: ToyEngine) -> None:
        self.logp0_bos = log_softmax(engine.bos_logits)
        self.logp0 = log_softmax(engine.logits)
        self.logq_bos = log_softmax(engine.bos_logits / TAU)
        self.logq = log_softmax(engine.logits / TAU)

    def _log(self, seq, start: int, bos, rows) -> float:
        total = 0.0
        for t in range(start, len(seq)):
            total += bos[seq[t]] if t == 0 else rows[seq[t - 1], seq[t]]
        return total

    def log_q(self, seq, start: int) -> float:
        """log q_tau(seq[start:] | seq[:start])."""
        return self._log(seq, start, self.logq_bos, self.logq)

    def log_p0(self, seq, start: int) -> float:
        return self._log(seq, start, self.logp0_bos, self.logp0)

    def kernel(self, length: int, corrected: bool = True) -> tuple[list[tuple[int, ...]], np.ndarray]:
        states = list(itertools.product(range(VOCAB), repeat=length))
        index = {s: i for i, s in enumerate(states)}
        matrix = np.zeros((len(states), len(states)))
        for x in states:
            for cut in range(length):
                for tail in itertools.product(range(VOCAB), repeat=length - cut):
                    y = x[:cut] + tail
                    log_forward = self.log_q(y, cut)
                    log_ratio = ALPHA * (self.log_p0(y, cut) - self.log_p0(x, cut))
                    if corrected:
                        log_ratio += self.log_q(x, cut) - log_forward
                    move = np.exp(log_forward) * min(1.0, np.exp(log_ratio)) / length
                    matrix[index[x], index[y]] += move
                    matrix[index[x], index[x]] += np.exp(log_forward) / length - move
        return states, matrix

    def chain_law(self, block: int, corrected: bool = True, steps: int = K) -> dict[tuple[int, ...], float]:
        law = {(): 1.0}
        for length in range(block, N + 1, block):
            extended: dict[tuple[int, ...], float] = {}
            for prefix, mass in law.items():
                for tail in itertools.product(range(VOCAB), repeat=block):
                    seq = prefix + tail
                    extended[seq] = extended.get(seq, 0.0) + mass * np.exp(self.log_q(seq, len(prefix)))
            states, matrix = self.kernel(length, corrected)
            vector = np.array([extended[s] for s in states]) @ np.linalg.matrix_power(matrix, steps)
            law = dict(zip(states, vector, strict=True))
        return law

    def target(self) -> dict[tuple[int, ...], float]:
        states = list(itertools.product(range(VOCAB), repeat=N))
        weights = np.exp([ALPHA * self.log_p0(s, 0) for s in states])
        return dict(zip(states, weights / weights.sum(), strict=True))


def chi_square_pvalue(counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float]) -> float:
    """Pearson chi-square, pooling cells with expected count < 5 into one."""
    total = sum(counts.values())
    observed, expected, pooled_o, pooled_e = [], [], 0.0, 0.0
    for state, p in law.items():
        if p * total >= 5:
            observed.append(counts.get(state, 0))
            expected.append(p * total)
        else:
            pooled_o += counts.get(state, 0)
            pooled_e += p * total
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    expected = np.array(expected) * (sum(observed) / sum(expected))
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return ToyEngine(write_toy_table(tmp_path_factory.mktemp("law") / "t.json", vocab=VOCAB, seed=9, scale=1.2))


def sample_final_states(engine, block: int, stepper) -> dict[tuple[int, ...], int]:
    kernel = PowerMH(ALPHA, TAU)
    schedule = BlockSchedule(N, block, K)
    counts: dict[tuple[int, ...], int] = {}
    for chain in range(CHAINS):
        state, _ = run_chain(kernel, engine, stepper, [], ChainKey(2024, 0, chain), schedule)
        key = tuple(int(t) for t in state.tokens)
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("block", [4, 2])
def test_powermh_follows_exact_kernel_law(engine, block):
    exact = ExactLaw(engine)
    counts = sample_final_states(engine, block, SequentialStepper())
    assert chi_square_pvalue(counts, exact.chain_law(block)) > 1e-3
    # The test has power: wrong laws are rejected on the same samples.
    assert chi_square_pvalue(counts, exact.chain_law(block, corrected=False)) < 1e-6
    assert chi_square_pvalue(counts, exact.target()) < 1e-6


def test_presto_chains_follow_the_same_law(engine):
    exact = ExactLaw(engine)
    counts = sample_final_states(engine, 4, PrefetchStepper(BreadthFirst(), 3))
    assert chi_square_pvalue(counts, exact.chain_law(4)) > 1e-3


def test_kernel_matrix_is_stochastic_and_leaves_target_invariant(engine):
    exact = ExactLaw(engine)
    states, matrix = exact.kernel(N)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-12)
    target = np.array([exact.target()[s] for s in states])
    np.testing.assert_allclose(target @ matrix, target, atol=1e-12)


def test_uniform_cut_is_the_uniform_law_on_every_cut():
    for length in (1, 2, 3, 5, 8):
        grid = (np.arange(64 * length) + 0.5) / (64 * length)  # 64 midpoints per cut's interval
        counts = np.bincount([uniform_cut(length, float(u)) for u in grid], minlength=length)
        assert counts.tolist() == [64] * length
        assert uniform_cut(length, 0.0) == 0 and uniform_cut(length, 1.0 - 2.0**-53) == length - 1
    with pytest.raises(ValueError, match="at least one generated token"):
        uniform_cut(0, 0.5)  # not cut -1, which would splice a suffix onto the state's last token


@pytest.mark.parametrize("length", [3, N])
def test_one_step_kernel_is_the_exact_kernel(engine, length):
    """P(x -> y) from PowerMH's cut() on a grid of uniforms and its decide() equals ExactLaw's P."""
    exact, model, kernel = ExactLaw(engine), ToyModel(engine), PowerMH(ALPHA, TAU)
    states, reference = exact.kernel(length)
    index = {s: i for i, s in enumerate(states)}
    grid = (np.arange(60 * length) + 0.5) / (60 * length)
    matrix = np.zeros_like(reference)
    for x in states:
        current = model.state(x)
        cuts = [kernel.cut(current, FixedInputs(cut_uniform=float(u))) for u in grid]
        cut_law = np.bincount(cuts, minlength=length) / grid.size
        for c in range(length):
            for tail in itertools.product(range(VOCAB), repeat=length - c):
                suffix = model.suffix(x[:c] + tail, c)
                decision = kernel.decide(current, c, [suffix], FixedInputs())
                assert tuple(decision.proposal.tokens) == x[:c] + tail
                proposed = cut_law[c] * math.exp(suffix.logq.sum())
                move = proposed * math.exp(decision.log_accept)
                matrix[index[x], index[x[:c] + tail]] += move
                matrix[index[x], index[x]] += proposed - move
    np.testing.assert_allclose(matrix, reference, rtol=0, atol=1e-12)
    _, target = model.target(length, alpha=ALPHA)
    flow = target[:, None] * matrix
    np.testing.assert_allclose(flow, flow.T, rtol=0, atol=1e-12)
