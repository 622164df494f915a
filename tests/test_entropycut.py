"""EntropyCut: its cut law, exact detailed balance, its law on the toy engine, PreSTO exactness.

The reference quantities are computed here in closed form from the toy table, independently
of the kernel code: the entropy profile of every sequence, the cut law as the kernel's
docstring writes it, and the one-step kernel matrix by enumerating every (cut, suffix).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.entropycut import EntropyCut, cut_law, invert_cut_cdf
from presto.samplers.randomness import ChainKey
from tests.conftest import run_cli, toy_args, write_toy_table
from tests.test_law import chi_square_pvalue
from tests.toy_model import CachedToyEngine, FixedInputs, ToyModel, cli_chains

VOCAB, N, K, ALPHA, TAU = 3, 4, 100, 2.0, 0.5


def reference_cut_law(entropies: np.ndarray, beta: float, mix: float) -> np.ndarray:
    """The docstring's law, written out with plain loops (independent of the kernel code)."""
    length = len(entropies)
    jumps = [0.0] + [entropies[c] - entropies[c - 1] for c in range(1, length)]
    weights = [jump**beta if (c > 0 and jump > 0) else 0.0 for c, jump in enumerate(jumps)]
    total = sum(weights)
    entropy_law = [w / total for w in weights] if total > 0 else [1.0 / length] * length
    return np.array([(1 - mix) * e + mix / length for e in entropy_law])


def reference_matrix(
    model: ToyModel, length: int, beta: float, mix: float, alpha: float = ALPHA, tau: float = TAU, corrected=True
) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """P(x -> y) = sum_c p_x(c) q_tau(y[c:] | x[:c]) A_c(x, y), rejected mass on the diagonal."""
    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    laws = {s: reference_cut_law(model.entropies(s), beta, mix) for s in states}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        for c in range(length):
            if laws[x][c] == 0:
                continue
            for tail in itertools.product(range(model.vocab), repeat=length - c):
                y = x[:c] + tail
                log_q_forward = model.per_token(y, c, tau).sum()
                log_ratio = (
                    alpha * (model.per_token(y, c).sum() - model.per_token(x, c).sum())
                    + model.per_token(x, c, tau).sum()
                    - log_q_forward
                )
                if corrected:
                    log_ratio += math.log(laws[y][c]) - math.log(laws[x][c]) if laws[y][c] > 0 else -math.inf
                move = laws[x][c] * math.exp(log_q_forward) * min(1.0, math.exp(min(log_ratio, 0.0)))
                matrix[index[x], index[y]] += move
                matrix[index[x], index[x]] += laws[x][c] * math.exp(log_q_forward) - move
    return states, matrix


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    return write_toy_table(tmp_path_factory.mktemp("entropycut") / "t.json", vocab=VOCAB, seed=9, scale=1.2)


@pytest.fixture(scope="module")
def model(table) -> ToyModel:
    return ToyModel(ToyEngine(table))


def test_cached_engine_matches_toy_engine(table):
    """The law tests' fast engine returns exactly what ToyEngine returns."""
    reference, cached = ToyEngine(table), CachedToyEngine(table)
    kernel = EntropyCut(ALPHA, TAU)
    for chain in range(4):
        a, _ = run_chain(kernel, reference, SequentialStepper(), [], ChainKey(3, 0, chain), BlockSchedule(6, 3, 8))
        b, _ = run_chain(kernel, cached, SequentialStepper(), [], ChainKey(3, 0, chain), BlockSchedule(6, 3, 8))
        for field in ("tokens", "logp0", "logq", "entropy", "logq_extra"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


LAWS = [(4.0, 0.1), (0.0, 0.1), (4.0, 0.0), (2.5, 1.0), (0.5, 0.3)]


@pytest.mark.parametrize(("beta", "mix"), LAWS)
def test_cut_law_is_the_documented_law(model, beta, mix):
    kernel = EntropyCut(ALPHA, TAU, beta=beta, uniform_mix=mix)
    for length in range(1, 5):
        for seq in itertools.product(range(VOCAB), repeat=length):
            state = model.state(seq)
            law = kernel.cut_law(state)
            np.testing.assert_allclose(law, reference_cut_law(state.entropy, beta, mix), rtol=0, atol=1e-13)
            assert law.sum() == pytest.approx(1.0, abs=1e-13)


def test_cut_law_edge_cases():
    flat = np.array([1.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(cut_law(flat, 4.0, 0.0), 0.25)  # no increase anywhere: uniform fallback
    np.testing.assert_allclose(cut_law(np.array([2.0, 1.0, 0.5]), 4.0, 0.0), 1 / 3)  # only decreases
    np.testing.assert_allclose(cut_law(np.array([0.7]), 4.0, 0.0), [1.0])  # T = 1
    law = cut_law(np.array([0.5, 1.5, 1.0, 3.0]), 2.0, 0.2)  # jumps: -, +1, -0.5, +2 -> weights 0, 1, 0, 4
    np.testing.assert_allclose(law, 0.8 * np.array([0, 1, 0, 4]) / 5 + 0.05, atol=1e-15)
    law0 = cut_law(np.array([0.5, 1.5, 1.0, 3.0]), 0.0, 0.0)  # beta = 0: indicator of an increase
    np.testing.assert_allclose(law0, [0, 0.5, 0, 0.5], atol=1e-15)
    np.testing.assert_allclose(cut_law(np.array([0.5, 1.5, 1.0, 3.0]), 4.0, 1.0), 0.25)  # PowerMH's law
    # Large beta: jumps above 1 would overflow (inf / inf = NaN) and jumps below 1 would underflow
    # to all-zero weights (a wrong uniform fallback) without the scaling by the largest jump; jumps
    # of exactly 1 would do neither, so both sides are checked, against the law's closed form.
    for jump in (2.0, 0.5):
        high = jump * (1 + 1e-7)
        ratio = (jump / high) ** 1e6  # w_1 / w_3, about exp(-0.1)
        huge = cut_law(np.array([0.0, jump, 0.0, high]), 1e6, 0.0)
        np.testing.assert_allclose(huge, [0, ratio / (1 + ratio), 0, 1 / (1 + ratio)], rtol=1e-12, atol=0)


def test_cut_inverts_the_cdf_and_never_picks_a_zero_probability_cut(model):
    kernel = EntropyCut(ALPHA, TAU, beta=4.0, uniform_mix=0.0)
    grid = (np.arange(2000) + 0.5) / 2000
    for seq in itertools.product(range(VOCAB), repeat=4):
        state = model.state(seq)
        law = reference_cut_law(state.entropy, 4.0, 0.0)
        cdf = np.cumsum(law)
        for u in (*grid[::97], 0.0, 1.0 - 2.0**-53):
            cut = kernel.cut(state, FixedInputs(cut_uniform=float(u)))
            assert law[cut] > 0
            assert cut == min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), int(np.flatnonzero(law)[-1]))
        if seq[:2] == (0, 1):  # the grid frequencies are the law, up to the grid step
            freq = np.bincount([invert_cut_cdf(kernel.cut_law(state), u) for u in grid], minlength=4) / grid.size
            np.testing.assert_allclose(freq, law, atol=1.0 / grid.size + 1e-12)


def test_a_cut_outside_the_states_law_is_refused_not_accepted(model):
    """decide() at a cut of probability 0 under x's law: log p_x(c) = -inf would make the ratio
    +inf and accept a move the kernel never proposes; the traversals validate cuts before
    deciding, so reaching it is a caller's bug, and it must say so."""
    kernel = EntropyCut(ALPHA, TAU, beta=4.0, uniform_mix=0.0)
    x, y = (0, 0, 0, 0), (2, 2, 2, 0)  # x cuts only at 1; y never rises, so its law is uniform
    assert kernel.cut_law(model.state(x))[0] == 0 and kernel.cut_law(model.state(y))[0] > 0
    with pytest.raises(ValueError, match="probability 0"):
        kernel.decide(model.state(x), 0, [model.suffix(y, 0)], FixedInputs(accept_uniform=0.999))


def kernel_matrix(model: ToyModel, kernel: EntropyCut, length: int) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """P(x -> y) built from the kernel's own cut law and decide(), by enumeration."""
    states = list(itertools.product(range(model.vocab), repeat=length))
    index = {s: i for i, s in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    for x in states:
        current = model.state(x)
        law = kernel.cut_law(current)
        for c in range(length):
            if law[c] == 0:
                continue
            for tail in itertools.product(range(model.vocab), repeat=length - c):
                suffix = model.suffix(x[:c] + tail, c)
                decision = kernel.decide(current, c, [suffix], FixedInputs())
                assert tuple(decision.proposal.tokens) == x[:c] + tail
                q = math.exp(suffix.logq.sum())
                move = law[c] * q * math.exp(decision.log_accept)
                matrix[index[x], index[x[:c] + tail]] += move
                matrix[index[x], index[x]] += law[c] * q - move
    return states, matrix


@pytest.mark.parametrize(("beta", "mix"), [(4.0, 0.1), (4.0, 0.0), (0.5, 0.3)])
@pytest.mark.parametrize("length", [3, 4])
def test_one_step_kernel_satisfies_detailed_balance_exactly(model, beta, mix, length):
    kernel = EntropyCut(ALPHA, TAU, beta=beta, uniform_mix=mix)
    _, matrix = kernel_matrix(model, kernel, length)
    _, target = model.target(length)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    flow = target[:, None] * matrix
    np.testing.assert_allclose(flow, flow.T, rtol=0, atol=1e-10)
    np.testing.assert_allclose(target @ matrix, target, rtol=0, atol=1e-10)
    # The kernel is the one written in the docstring, and the check has power: without the
    # reverse/forward cut-law ratio the same enumeration breaks detailed balance.
    _, reference = reference_matrix(model, length, beta, mix)
    np.testing.assert_allclose(matrix, reference, rtol=0, atol=1e-12)
    if mix < 1:
        _, wrong = reference_matrix(model, length, beta, mix, corrected=False)
        wrong_flow = target[:, None] * wrong
        assert np.abs(wrong_flow - wrong_flow.T).max() > 1e-4


LAW_CHAINS = 800


def test_chains_follow_the_exact_law_after_k_transitions(model, table):
    """V=3, n=4, one block, K=100, alpha=2, tau=0.5, default beta and uniform_mix.

    The null is the exact law of the final state (extension at tau, then P^K by enumeration),
    whose stationary law is pi_alpha (detailed balance above). With uniform_mix=0.1 the
    whole-sequence cut c=0 has probability 0.025, so this chain is still at total variation
    ~0.04 from pi_alpha after 100 transitions; the chi-square therefore uses the K-step law.
    Half of the chains run through PreSTO (BFS, N_pf=5).
    """
    kernel = EntropyCut(ALPHA, TAU)
    engine = CachedToyEngine(table)
    schedule = BlockSchedule(N, N, K)
    counts: dict[tuple[int, ...], int] = {}
    for chain in range(LAW_CHAINS):
        stepper = SequentialStepper() if chain % 2 else PrefetchStepper(BreadthFirst(), 5)
        state, _ = run_chain(kernel, engine, stepper, [], ChainKey(2024, 0, chain), schedule)
        key = tuple(int(t) for t in state.tokens)
        counts[key] = counts.get(key, 0) + 1
    states, matrix = reference_matrix(model, N, 4.0, 0.1)
    initial = model.extension_law(N)
    exact = dict(zip(states, initial @ np.linalg.matrix_power(matrix, K), strict=True))
    assert chi_square_pvalue(counts, exact) > 1e-3
    # Wrong laws are rejected on the same samples: the kernel without the cut-law ratio,
    # p0 itself (alpha = 1), and the initial extension law.
    _, uncorrected = reference_matrix(model, N, 4.0, 0.1, corrected=False)
    wrong = {
        "uncorrected": initial @ np.linalg.matrix_power(uncorrected, K),
        "p0": model.target(N, alpha=1.0)[1],
        "extension": initial,
    }
    for name, law in wrong.items():
        assert chi_square_pvalue(counts, dict(zip(states, law, strict=True))) < 1e-6, name


SCHEDULES = [BlockSchedule(12, 4, 6), BlockSchedule(16, 16, 25), BlockSchedule(8, 2, 3)]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"n{s.max_new_tokens}B{s.block_size}K{s.steps}")
@pytest.mark.parametrize(("beta", "mix"), [(4.0, 0.1), (4.0, 0.0)])
def test_bfs_equals_sequential_token_for_token(tmp_path, schedule, beta, mix):
    engine = ToyEngine(write_toy_table(tmp_path / "t.json", vocab=5, seed=11))
    kernel = EntropyCut(alpha=4.0, tau=0.25, beta=beta, uniform_mix=mix)
    discarded = 0
    for seed in range(25):
        key = ChainKey(seed, prompt=seed % 3, chain=seed % 2)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), [], key, schedule)
        for n_pf in (1, 2, 5, 20):
            state, trace = run_chain(kernel, engine, PrefetchStepper(BreadthFirst(), n_pf), [], key, schedule)
            np.testing.assert_array_equal(state.tokens, reference.tokens)
            np.testing.assert_array_equal(state.entropy, reference.entropy)
            assert trace.accepts == reference_trace.accepts
            assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
            discarded += trace.discarded_requests
            if n_pf == 1:
                assert trace.discarded_requests == 0  # a depth-0 request is never speculative
    if schedule.steps > 3:
        assert discarded > 0, "the validate-and-discard path was never exercised"


def test_kernel_options_are_validated():
    from presto.config import ConfigError

    for kwargs, key in [
        ({"beta": -1.0}, "sampler.beta"),
        ({"beta": float("nan")}, "sampler.beta"),
        ({"beta": "4"}, "sampler.beta"),
        ({"uniform_mix": 1.5}, "sampler.uniform_mix"),
        ({"uniform_mix": -0.1}, "sampler.uniform_mix"),
        ({"uniform_mix": True}, "sampler.uniform_mix"),
    ]:
        with pytest.raises(ConfigError, match=key):
            EntropyCut(ALPHA, TAU, **kwargs)


def test_cli_runs_entropycut_sequential_and_presto_alike(toy_table, tmp_path):
    import json

    for traversal in ("sequential", "bfs"):
        result = run_cli(
            *toy_args(toy_table, tmp_path / traversal, "sampler=entropycut", f"traversal={traversal}", steps=12)
        )
        assert result.returncode == 0, result.stderr
    assert cli_chains(tmp_path / "sequential") == cli_chains(tmp_path / "bfs")
    summary = json.loads((tmp_path / "bfs" / "summary.json").read_text())
    assert summary["sampler"] == "entropycut" and summary["discarded_requests"] >= 0


@pytest.mark.parametrize(
    "override", ["sampler.beta=-1", "sampler.uniform_mix=1.5", "sampler.uniform_mix=-0.5", "sampler.beta=abc"]
)
def test_bad_entropycut_input_is_one_clear_line(toy_table, tmp_path, override):
    result = run_cli(*toy_args(toy_table, tmp_path / "run", "sampler=entropycut", override, steps=12))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and override.split("=")[0] in error_lines[0], result.stderr
