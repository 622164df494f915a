"""MultiTryMH: its requests, exact detailed balance, its law on the toy engine, PreSTO exactness.

Reference quantities come from the toy table in closed form (tests/toy_model.py's
ToyModel), not from the kernel: the mixture proposal density of a suffix, the importance
weights, and the one-step kernel by enumerating every tuple of candidates and references.
The enumerations take the tuple's law as i.i.d. draws from q_mix; the independence test of
the tries' temperatures is what ties that law to the kernel's requests.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from presto.config import ConfigError
from presto.engines.base import SuffixResult
from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.multitry import DEFAULT_TEMPERATURES, MultiTryMH
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import run_cli, toy_args, write_toy_table
from tests.test_law import chi_square_pvalue
from tests.toy_model import CachedToyEngine, FixedInputs, ToyModel, cli_chains

VOCAB, N, K, ALPHA, TAU = 3, 4, 100, 2.0, 0.5
TEMPS = DEFAULT_TEMPERATURES


class MixtureModel:
    """Closed-form proposal density and importance weight of suffixes under the mixture."""

    def __init__(self, model: ToyModel, temperatures=TEMPS, alpha: float = ALPHA) -> None:
        self.model, self.temperatures, self.alpha = model, temperatures, alpha

    def log_q_mix(self, seq, start: int) -> float:
        logs = [self.model.per_token(seq, start, t).sum() for t in self.temperatures]
        return float(np.logaddexp.reduce(logs) - math.log(len(logs)))

    def log_w(self, seq, start: int) -> float:
        return self.alpha * float(self.model.per_token(seq, start).sum()) - self.log_q_mix(seq, start)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return write_toy_table(tmp_path_factory.mktemp("multitry") / "t.json", vocab=VOCAB, seed=9, scale=1.2)


def small_model(tmp_path, vocab: int) -> ToyModel:
    return ToyModel(ToyEngine(write_toy_table(tmp_path / f"v{vocab}.json", vocab=vocab, seed=4, scale=1.5)))


def test_requests_are_2m_minus_1_suffixes_of_the_shared_prefix(table):
    model = ToyModel(ToyEngine(table))
    kernel = MultiTryMH(ALPHA, TAU)
    state = model.state((0, 2, 1, 1), TEMPS)
    prompt = [7, 8]
    picks, cuts = [], []
    for transition in range(1500):
        inputs = ChainKey(5, 0, 0).decision(0, transition)
        cut = kernel.cut(state, inputs)
        cuts.append(cut)
        requests = kernel.requests(prompt, state, cut, inputs)
        assert len(requests) == 7
        assert requests == kernel.requests(prompt, state, cut, ChainKey(5, 0, 0).decision(0, transition))
        assert len({r.seed for r in requests}) == 7
        for r in requests:
            assert r.prefix == (7, 8, *state.tokens[:cut].tolist())
            assert r.num_new_tokens == 4 - cut and r.extra_temperatures == TEMPS
            picks.append(TEMPS.index(r.temperature))
    counts = np.bincount(picks, minlength=3)
    assert stats.chisquare(counts).pvalue > 1e-3  # each try's temperature is uniform on the set
    # The cut is uniform on {0, ..., T-1}: a law that skipped a cut would still leave pi_alpha
    # invariant, so the chain-law test could not see it.
    assert stats.chisquare(np.bincount(cuts, minlength=4)).pvalue > 1e-3


def try_temperature_indices(kernel: MultiTryMH, model: ToyModel, decisions: int) -> np.ndarray:
    """Indices into TEMPS of the temperatures kernel.requests asks for: one row of 2M-1 per decision.

    The decisions belong to different chains, prompts, stages and transitions, so each row is one
    draw of the decision's tuple of tries (the law over keys is the law the kernel's draws have).
    """
    state = model.state((0, 2, 1, 1), TEMPS)
    rows = []
    for d in range(decisions):
        inputs = ChainKey(d, d % 3, d % 2).decision(d % 4, d // 4)
        requests = kernel.requests([7, 8], state, kernel.cut(state, inputs), inputs)
        rows.append([TEMPS.index(r.temperature) for r in requests])
    return np.array(rows)


UNIFORM_P = 1e-4  # the real kernel's smallest p-value below is above 1e-2; a dependent draw's is ~0


@pytest.mark.parametrize("m", [2, 4])
def test_the_tries_temperatures_are_independent_uniform_draws(table, m):
    """Liu et al.'s rule needs the 2M-1 tries i.i.d. from the proposal q_mix, i.e. each try's
    temperature uniform on the set independently of every other try's. The pooled marginal (test
    above) is blind to one temperature shared by all tries, to a round-robin assignment from a
    random start, and to references that copy the candidates' temperatures: every try's marginal
    is uniform under each of them, yet none leaves pi_alpha invariant. Here every try's marginal
    (candidates and references alike), the J x J table of every pair of tries of one decision and,
    for M = 2, the joint law of all three tries must be the product of uniforms. This is what makes
    the closed-form tuple law of kernel_matrix and exact_m2_matrix the kernel's own."""
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=m)
    j = len(TEMPS)
    picks = try_temperature_indices(kernel, ToyModel(ToyEngine(table)), 3000)
    assert picks.shape == (3000, 2 * m - 1)
    pvalues = {f"try {i}": stats.chisquare(np.bincount(picks[:, i], minlength=j)).pvalue for i in range(2 * m - 1)}
    for a, b in itertools.combinations(range(2 * m - 1), 2):
        pair = np.bincount(picks[:, a] * j + picks[:, b], minlength=j * j)
        pvalues[f"tries {a},{b}"] = stats.chisquare(pair).pvalue
    if m == 2:
        pvalues["all tries"] = stats.chisquare(np.bincount(picks @ j ** np.arange(3), minlength=j**3)).pvalue
    worst = min(pvalues, key=pvalues.get)
    assert pvalues[worst] > UNIFORM_P, (worst, pvalues[worst])


def kernel_matrix(mixture: MixtureModel, kernel: MultiTryMH, length: int):
    """P(x -> y) from the kernel's decide(), enumerating every candidate/reference tuple.

    For each tuple and each candidate k, the selection uniform is placed in the middle of
    k's interval of the selection CDF computed here, so decide() must pick k; the tuple's
    probability, the selection probability and decide()'s acceptance give the move.

    The tuple's probability is the closed-form product of q_mix over the 2M-1 tries, not a law
    read from requests(): an empirical law of the kernel's draws would be inexact. The product is
    the kernel's own law because requests() asks for temperatures that are independent uniform
    draws from the set (test_the_tries_temperatures_are_independent_uniform_draws) with distinct
    seeds (test_requests_are_2m_minus_1_suffixes_of_the_shared_prefix), and the engine samples
    each request at its temperature from its own seed: given the prefix, each try is then an
    independent draw from q_mix.
    """
    model, m = mixture.model, kernel.num_candidates
    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        current = model.state(x, TEMPS)
        for c in range(length):
            tails = list(itertools.product(range(model.vocab), repeat=length - c))
            suffixes = [model.suffix(x[:c] + t, c, TEMPS) for t in tails]
            log_q = np.array([mixture.log_q_mix(x[:c] + t, c) for t in tails])
            log_w = np.array([mixture.log_w(x[:c] + t, c) for t in tails])
            log_w_x = mixture.log_w(x, c)
            for tup in itertools.product(range(len(tails)), repeat=2 * m - 1):
                cand, refs = tup[:m], tup[m:]
                prob = math.exp(log_q[list(tup)].sum()) / length
                weights = np.exp(log_w[list(cand)] - log_w[list(cand)].max())
                cdf = np.cumsum(weights) / weights.sum()
                expected = min(
                    0.0, np.logaddexp.reduce(log_w[list(cand)]) - np.logaddexp.reduce([*log_w[list(refs)], log_w_x])
                )
                for k in range(m):
                    selection = float(weights[k] / weights.sum())
                    lower = cdf[k - 1] if k else 0.0
                    inputs = FixedInputs(selection_uniform=float((lower + cdf[k]) / 2))
                    decision = kernel.decide(current, c, [suffixes[i] for i in tup], inputs)
                    y = x[:c] + tails[cand[k]]
                    assert tuple(decision.proposal.tokens) == y
                    assert decision.log_accept == pytest.approx(expected, abs=1e-12)
                    move = prob * selection * math.exp(decision.log_accept)
                    matrix[index[x], index[y]] += move
                    matrix[index[x], index[x]] += prob * selection - move
    return states, matrix


@pytest.mark.parametrize(("vocab", "length", "m"), [(2, 3, 2), (2, 2, 3), (3, 2, 1)])
def test_one_step_kernel_satisfies_detailed_balance_exactly(tmp_path, vocab, length, m):
    mixture = MixtureModel(small_model(tmp_path, vocab))
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=m)
    _, matrix = kernel_matrix(mixture, kernel, length)
    _, target = mixture.model.target(length)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    flow = target[:, None] * matrix
    np.testing.assert_allclose(flow, flow.T, rtol=0, atol=1e-10)
    np.testing.assert_allclose(target @ matrix, target, rtol=0, atol=1e-10)


def exact_m2_matrix(mixture: MixtureModel, length: int, reference_current: bool = True):
    """The M=2 kernel in closed form, vectorized over (candidate, other candidate, reference).

    P(x -> x[:c]+s) = (1/T) sum_c 2 q(s) sum_{o,r} q(o) q(r) w(s)/(w(s)+w(o))
    min(1, (w(s)+w(o)) / (w(r)+w(x[c:]))). ``reference_current=False`` drops w(x[c:]) from
    the denominator (a wrong rule, for the power check). The product q(s) q(o) q(r) is the law of
    i.i.d. tries, legitimate as in kernel_matrix.
    """
    model = mixture.model
    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        for c in range(length):
            tails = list(itertools.product(range(model.vocab), repeat=length - c))
            q = np.exp([mixture.log_q_mix(x[:c] + t, c) for t in tails])
            log_w = np.array([mixture.log_w(x[:c] + t, c) for t in tails])
            top = log_w.max()
            w, w_x = np.exp(log_w - top), math.exp(mixture.log_w(x, c) - top)
            pair = w[:, None] + w[None, :]  # (s, o)
            select = w[:, None] / pair
            accept = np.minimum(1.0, pair[:, :, None] / (w[None, None, :] + (w_x if reference_current else 0.0)))
            moves = 2 * q * np.einsum("so,sor,o,r->s", select, accept, q, q) / length
            for t, move in zip(tails, moves, strict=True):
                matrix[index[x], index[x[:c] + t]] += move
            matrix[index[x], index[x]] += 1.0 / length - moves.sum()
    return states, matrix


def test_closed_form_m2_kernel_matches_the_kernel_and_has_power(tmp_path):
    mixture = MixtureModel(small_model(tmp_path, 2))
    _, from_kernel = kernel_matrix(mixture, MultiTryMH(ALPHA, TAU, num_candidates=2), 3)
    _, closed = exact_m2_matrix(mixture, 3)
    np.testing.assert_allclose(closed, from_kernel, rtol=0, atol=1e-12)
    _, target = mixture.model.target(3)
    _, wrong = exact_m2_matrix(mixture, 3, reference_current=False)
    wrong_flow = target[:, None] * wrong
    assert np.abs(wrong_flow - wrong_flow.T).max() > 1e-4  # detailed balance catches a wrong rule


def test_weights_of_long_suffixes_are_computed_in_log_space():
    """1000-token suffixes at alpha=4: log w is about -4500, far outside float range.

    The toy kernels above have |log w| of a few nats, where exponentiating raw values works;
    here every suffix shares one long per-token profile and differs from the others by a few
    nats, so the selection law and the acceptance are moderate numbers that only a log-space
    computation gets (the reference uses logaddexp alone).
    """
    rng = np.random.default_rng(7)
    length, m, alpha = 1000, 4, 4.0
    kernel = MultiTryMH(alpha, 1 / alpha, num_candidates=m)
    j = len(kernel.temperatures)
    base_p0, base_q = -rng.uniform(0.5, 2.5, length), -rng.uniform(0.5, 2.5, (length, j))

    def suffix(q_drop: float) -> SuffixResult:
        logp0, logq_extra = base_p0.copy(), base_q.copy()
        logp0[0] -= rng.uniform(0, 1)
        logq_extra[1] -= rng.uniform(0, 3, j) + q_drop
        return SuffixResult(rng.integers(0, 50, length), logp0, logq_extra[:, 0], np.zeros(length), logq_extra)

    # x's suffix is unlikely under the proposal (a heavy weight), so the acceptance is below 1.
    results, current = [suffix(0.0) for _ in range(2 * m - 1)], suffix(4.0)
    state = ChainState.empty(j).splice(0, current)
    log_w = np.array(
        [alpha * r.logp0.sum() - np.logaddexp.reduce(r.logq_extra.sum(axis=0)) + math.log(j) for r in results]
        + [alpha * current.logp0.sum() - np.logaddexp.reduce(current.logq_extra.sum(axis=0)) + math.log(j)]
    )
    assert log_w.max() < -3000  # exp(log w) is 0.0 for every suffix
    expected = min(0.0, np.logaddexp.reduce(log_w[:m]) - np.logaddexp.reduce(log_w[m:]))
    assert -5 < expected < -0.5  # a move accepted with probability well inside (0, 1)
    selection = np.exp(log_w[:m] - np.logaddexp.reduce(log_w[:m]))
    cdf = np.cumsum(selection)
    for k in range(m):
        lower = cdf[k - 1] if k else 0.0
        decision = kernel.decide(state, 0, results, FixedInputs(selection_uniform=float((lower + cdf[k]) / 2)))
        np.testing.assert_array_equal(decision.proposal.tokens, results[k].tokens)
        assert decision.log_accept == pytest.approx(expected, abs=1e-9)


LAW_CHAINS = 500


def test_chains_follow_the_exact_law_after_k_transitions(table):
    """V=3, n=4, one block, K=100, alpha=2, tau=0.5 (extension), M=2, temperatures {0.25, 0.5, 1}.

    M=2 keeps the exact K-step law enumerable (closed form above); its stationary law is
    pi_alpha and after 100 transitions it is within 1e-6 of it in total variation, so the
    chains follow pi_alpha. Wrong laws (p0, the extension law) are rejected on the same
    samples. Half of the chains run through PreSTO (BFS, N_pf=5).
    """
    model = ToyModel(ToyEngine(table))
    mixture = MixtureModel(model)
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=2)
    engine = CachedToyEngine(table)
    counts: dict[tuple[int, ...], int] = {}
    for chain in range(LAW_CHAINS):
        stepper = SequentialStepper() if chain % 2 else PrefetchStepper(BreadthFirst(), 5)
        state, _ = run_chain(kernel, engine, stepper, [], ChainKey(2024, 0, chain), BlockSchedule(N, N, K))
        key = tuple(int(t) for t in state.tokens)
        counts[key] = counts.get(key, 0) + 1
    states, matrix = exact_m2_matrix(mixture, N)
    _, target = model.target(N)
    initial = model.extension_law(N)
    law = initial @ np.linalg.matrix_power(matrix, K)
    assert 0.5 * np.abs(law - target).sum() < 1e-6
    assert chi_square_pvalue(counts, dict(zip(states, target, strict=True))) > 1e-3
    for name, wrong in {"p0": model.target(N, alpha=1.0)[1], "extension": initial}.items():
        assert chi_square_pvalue(counts, dict(zip(states, wrong, strict=True))) < 1e-6, name


SCHEDULES = [BlockSchedule(12, 4, 6), BlockSchedule(16, 16, 25), BlockSchedule(8, 2, 3)]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"n{s.max_new_tokens}B{s.block_size}K{s.steps}")
@pytest.mark.parametrize("m", [4, 2])
def test_bfs_equals_sequential_token_for_token(tmp_path, schedule, m):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=11))
    kernel = MultiTryMH(alpha=4.0, tau=0.25, num_candidates=m)
    for seed in range(12):
        key = ChainKey(seed, prompt=seed % 3, chain=seed % 2)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
        for n_pf in (1, 2, 5, 20):
            state, trace = run_chain(kernel, engine, PrefetchStepper(BreadthFirst(), n_pf), [], key, schedule)
            np.testing.assert_array_equal(state.tokens, reference.tokens)
            np.testing.assert_array_equal(state.logq_extra, reference.logq_extra)
            assert trace.accepts == reference_trace.accepts
            assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
            assert trace.discarded_requests == 0  # the uniform cut never depends on the state


def test_one_engine_call_per_transition(table):
    engine = ToyEngine(table)
    kernel = MultiTryMH(ALPHA, TAU)
    _, trace = run_chain(kernel, engine, SequentialStepper(), [], ChainKey(1, 0, 0), BlockSchedule(4, 4, 10))
    assert engine.stats.calls == 1 + 10 and len(trace.accepts) == 10
    assert engine.stats.requests == 1 + 10 * 7


def test_kernel_options_are_validated():
    for kwargs, key in [
        ({"num_candidates": 0}, "sampler.num_candidates"),
        ({"num_candidates": 2.5}, "sampler.num_candidates"),
        ({"num_candidates": True}, "sampler.num_candidates"),
        ({"temperatures": []}, "sampler.temperatures"),
        ({"temperatures": [0.5, -1.0]}, "sampler.temperatures"),
        ({"temperatures": [0.0]}, "sampler.temperatures"),
        ({"temperatures": "0.5"}, "sampler.temperatures"),
        ({"temperatures": None}, "sampler.temperatures"),
    ]:
        with pytest.raises(ConfigError, match=key):
            MultiTryMH(ALPHA, TAU, **kwargs)


def test_cli_runs_multitry_sequential_and_presto_alike(toy_table, tmp_path):
    for traversal in ("sequential", "bfs"):
        result = run_cli(
            *toy_args(toy_table, tmp_path / traversal, "sampler=multitry", f"traversal={traversal}", steps=12)
        )
        assert result.returncode == 0, result.stderr
    assert cli_chains(tmp_path / "sequential") == cli_chains(tmp_path / "bfs")
    config = (tmp_path / "bfs" / "config.yaml").read_text()
    assert "num_candidates: 4" in config and "temperatures:" in config
    summary = json.loads((tmp_path / "bfs" / "summary.json").read_text())
    assert summary["sampler"] == "multitry"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("sampler.num_candidates=0", "sampler.num_candidates"),
        ("sampler.temperatures=[]", "sampler.temperatures"),
        ("sampler.temperatures=[0.5,-1.0]", "sampler.temperatures"),
    ],
)
def test_bad_multitry_input_is_one_clear_line(toy_table, tmp_path, override, key):
    result = run_cli(*toy_args(toy_table, tmp_path / "run", "sampler=multitry", override, steps=12))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and key in error_lines[0], result.stderr
