"""Tests that kill the mutants a hand mutation review of the evaluation modules found surviving.

Each test names the mutants it kills (ids of the review: Q = eval/quality.py, T = eval/tost.py,
R = eval/report.py, S and F = eval/runs.py's speedup and prompt_figures (which the report prints),
C/B/L/P/I = baselines/common, best_of_n, lowtemp, power_smc, __init__, TS = engines/token_sampling.py,
Y = engines/toy.py). They check closed forms on the toy table, laws of the statistics (a zero
margin admits no equivalence, a confidence interval inside the margin is equivalence) and
independent recomputations, rather than how the code computes them.

One test found a defect rather than a gap: systematic resampling could copy a particle of
weight 0 when the uniform was just below 1 (test_systematic_resampling_never_draws_a_particle_of_weight_zero).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from presto.baselines import build_baseline
from presto.baselines.best_of_n import BestOfN
from presto.baselines.common import state_until_eos
from presto.baselines.power_smc import PowerSMC, categorical, systematic_resample
from presto.config import SamplerSettings
from presto.engines.base import SuffixRequest, SuffixResult
from presto.engines.token_sampling import log_softmax
from presto.engines.toy import ToyEngine, ToyTableError, load_toy_table, write_random_toy_table
from presto.eval.quality import rescore, state_quality
from presto.eval.report import build_report, case_study_lines
from presto.eval.runs import RunData, load_run, pair_chains, speedup
from presto.eval.tost import interval_percent, paired_tost, pooled_tost
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import write_toy_table


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> ToyEngine:
    return ToyEngine(write_toy_table(tmp_path_factory.mktemp("toy") / "table.json", vocab=5, seed=11, scale=1.5))


def closed_form(engine: ToyEngine, prompt: list[int], tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per-token log p0 and entropy of p0 of ``tokens`` after ``prompt``, from the table itself."""
    logp0, entropy = [], []
    previous = prompt[-1] if prompt else None
    for token in tokens:
        row = log_softmax(engine.bos_logits if previous is None else engine.logits[previous])
        logp0.append(row[token])
        entropy.append(-float(np.sum(np.exp(row) * row)))
        previous = token
    return np.array(logp0), np.array(entropy)


# --- eval/quality.py ---------------------------------------------------------------------------


def test_stored_quality_is_under_p0_not_under_the_sampling_temperature(toy):
    """Q7 (state_quality from the state's log q_tau): eq. 21 is the mean log p0. At tau = 1 the two
    are equal, which is the only temperature the other tests stored a state at."""
    (result,) = toy.generate([SuffixRequest((), 6, 0.4, 5)])
    state = ChainState.empty().splice(0, result)
    logp0, entropy = closed_form(toy, [], state.tokens.tolist())
    quality = state_quality(state)
    assert quality.loglik == pytest.approx(float(np.mean(logp0)), abs=1e-12)
    assert quality.confidence == pytest.approx(-float(np.mean(entropy)), abs=1e-12)
    assert abs(float(np.mean(state.logq)) - quality.loglik) > 1e-3  # the test tells the two apart


def test_rescoring_conditions_on_the_prompt(toy):
    """Q6 (rescore drops the prompt): the first token's law is p0 after the prompt's last token.
    The toy task's prompts are empty, so the other tests could not see it."""
    prompt, tokens = [3, 1], [0, 4, 4, 2]
    logp0, entropy = closed_form(toy, prompt, tokens)
    quality = rescore(toy, prompt, tokens)
    assert quality.loglik == pytest.approx(float(np.mean(logp0)), abs=1e-12)
    assert quality.confidence == pytest.approx(-float(np.mean(entropy)), abs=1e-12)
    unprompted = rescore(toy, [], tokens)
    assert abs(unprompted.loglik - quality.loglik) > 1e-3
    # And it agrees with what the engine stored when it sampled after that prompt.
    (result,) = toy.generate([SuffixRequest(tuple(prompt), 5, 0.7, 2)])
    fresh = rescore(toy, prompt, result.tokens)
    stored = state_quality(ChainState.empty().splice(0, result))
    assert fresh.loglik == pytest.approx(stored.loglik, abs=1e-12)
    assert fresh.confidence == pytest.approx(stored.confidence, abs=1e-12)


# --- eval/tost.py ------------------------------------------------------------------------------

BASELINE = np.array([0.0, 1.0, 2.0, 3.0, 4.0])


@pytest.mark.parametrize("options", [{"margin": 0.0}, {"margin_sd": 0.0}])
def test_a_zero_margin_admits_no_equivalence(options):
    """T6 (`mean > -margin` -> `>=` when the standard error is 0) and T22 (margin_sd = 0 refused):
    H1 |mu_d| < 0 is empty, so no sample, not even two identical ones, is equivalent."""
    rng = np.random.default_rng(0)
    for variant in (BASELINE.copy(), BASELINE + rng.normal(scale=1e-3, size=5)):
        result = paired_tost(BASELINE, variant, **options)
        assert result.margin == 0 and result.defined
        assert not result.equivalent and result.p_eq >= 0.5


def test_a_negative_margin_is_refused():
    """T24 (abs() of a given margin): a negative margin is an input error, not its mirror image."""
    with pytest.raises(ValueError, match="margin"):
        paired_tost(BASELINE, BASELINE + 0.1, margin=-0.5)


def test_a_baseline_spread_of_rounding_is_no_spread():
    """T19 (baseline SD tolerance removed): per-prompt averages of equal values summed in another
    order differ in the last bit, and 0.2 of that spread is no margin to test against. (The
    existing test adds 1e-17 to -0.75, which rounds back to -0.75: its values are identical.)"""
    orders = [(0.1 + 0.2) + 0.3, 0.1 + (0.2 + 0.3)]
    assert orders[0] != orders[1]  # the test needs rounding noise
    baseline = np.array([orders[i % 2] for i in range(8)])
    assert baseline.std(ddof=1) > 0
    result = paired_tost(baseline, baseline[::-1].copy())
    assert result.baseline_sd == 0 and not result.defined and not result.equivalent


def spread_pair(rng: np.random.Generator, shift: float = 0.0, n: int = 40):
    baseline = rng.normal(size=n)
    return paired_tost(baseline, baseline + shift + rng.normal(scale=0.3, size=n))


def test_pooling_leaves_out_pairs_without_a_baseline_spread():
    """T11 (every pair pooled: a division by a zero baseline SD) and T13 (pairs counted before
    that filter): a pair whose margin is undefined cannot be standardized, so pooling it with
    the others equals pooling the others alone."""
    rng = np.random.default_rng(6)
    pairs = [spread_pair(rng, 0.05), spread_pair(rng, -0.02)]
    flat = paired_tost(np.full(5, 0.5), np.full(5, 0.5))
    assert not flat.defined
    with_flat, without = pooled_tost([pairs[0], flat, pairs[1]]), pooled_tost(pairs)
    assert with_flat.pairs == 2
    assert with_flat.as_dict() == without.as_dict()
    with pytest.raises(ValueError, match="standard deviation"):
        pooled_tost([flat])


@pytest.mark.parametrize("level", [0.05, 0.1])
def test_pooled_interval_is_the_z_interval_and_equivalence_is_its_inclusion(level):
    """T12/T21 (pooled interval at 1 - level/2, or widened on one side): the pooled test is a
    z-test, so its (1 - 2 level) interval is estimate +- z_{1-level} se, and p_eq < level holds
    exactly when that interval lies inside (-margin, margin)."""
    rng = np.random.default_rng(7)
    z = stats.norm.ppf(1 - level)
    seen = set()
    for shift in np.linspace(-0.15, 0.15, 13):
        pooled = pooled_tost([spread_pair(rng, shift), spread_pair(rng, shift)], level=level)
        assert (pooled.ci_low, pooled.ci_high) == pytest.approx(
            (pooled.estimate - z * pooled.se, pooled.estimate + z * pooled.se), rel=1e-12
        )
        inside = -pooled.margin_sd < pooled.ci_low and pooled.ci_high < pooled.margin_sd
        assert pooled.equivalent == inside
        seen.add(inside)
    assert seen == {True, False}  # both verdicts occur, so the equivalence is tested both ways


def test_pooling_with_an_exact_pair_takes_the_plain_mean_of_the_pairs():
    """T26 (the median instead of the mean): with an exact pair among them the pairs count equally,
    so the estimate is the mean of the standardized differences and its se sqrt(sum s_j^2) / J."""
    rng = np.random.default_rng(12)
    exact = paired_tost(BASELINE, BASELINE.copy())
    pairs = [exact, spread_pair(rng, 0.4), spread_pair(rng, 0.05)]
    m = np.array([p.mean_diff / p.baseline_sd for p in pairs])
    s = np.array([p.se / p.baseline_sd for p in pairs])
    pooled = pooled_tost(pairs)
    assert pooled.estimate == pytest.approx(float(m.mean()), rel=1e-12)
    assert pooled.se == pytest.approx(float(np.sqrt(np.sum(s**2)) / 3), rel=1e-12)
    assert abs(float(np.median(m)) - pooled.estimate) > 1e-3  # the test tells mean and median apart


@pytest.mark.parametrize(("level", "name"), [(0.05, "90%"), (0.1, "80%"), (0.025, "95%")])
def test_the_interval_is_named_by_its_coverage(level, name):
    """T28 (named 1 - level): a TOST at level a is the (1 - 2a) interval inside the margin."""
    assert interval_percent(level) == name


# --- eval/report.py ----------------------------------------------------------------------------

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 2}


def write_run(path: Path, records: list[dict], traversal: str = "sequential", **summary) -> Path:
    """A hand-written run directory (summary.json + chains.jsonl, no config.yaml)."""
    path.mkdir(parents=True)
    prompts = len({r["prompt_id"] for r in records})
    full = {**SUMMARY, "traversal": traversal, "n_pf": 1 if traversal == "sequential" else 4, "prompts": prompts}
    full.update(seed=0, chains=len(records), **summary)
    (path / "summary.json").write_text(json.dumps(full))
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def record(prompt: str, index: int = 0, calls: int = 4, seconds: float = 1.0, **extra) -> dict:
    base = {"prompt_id": prompt, "chain": index, "seed": 0, "model_calls": calls, "call_time_s": seconds}
    return {**base, "transitions": 4, "wall_time_s": seconds, **extra}


def tost_table(text: str) -> dict[str, dict[str, str]]:
    """The quality-equivalence table's rows by statistic, cells by column."""
    section = text[text.index("## Quality equivalence") :]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    rows = [dict(zip(header, [c.strip() for c in line.split("|")[1:-1]], strict=True)) for line in lines[1:]]
    return {row["statistic"]: row for row in rows}


def test_report_tost_rows_show_variant_minus_baseline_and_name_an_undefined_test(tmp_path):
    """R10 (the mean difference printed as A - B) and R8 (an undefined test printed as plain "no"):
    the mean difference is B - A, and a baseline without spread is "undefined", not "not
    equivalent"."""
    loglik = [-1.0, -1.4, -0.7, -2.0, -1.1]
    shift = 0.25
    seq = [record(f"p{i}", loglik=v, confidence=-0.5) for i, v in enumerate(loglik)]
    bfs = [record(f"p{i}", calls=2, loglik=v + shift, confidence=-0.5) for i, v in enumerate(loglik)]
    runs = [load_run(write_run(tmp_path / "seq", seq)), load_run(write_run(tmp_path / "bfs", bfs, "bfs"))]
    rows = tost_table(build_report(runs, tmp_path / "report.md", figures=False).read_text())
    expected = paired_tost(loglik, [v + shift for v in loglik])
    assert float(rows["loglik"]["mean diff (B−A)"]) == pytest.approx(expected.mean_diff, rel=1e-3)
    assert expected.mean_diff > 0 and rows["loglik"]["equivalent"] == "no"
    assert rows["confidence"]["equivalent"].startswith("undefined")


def accuracy_notes(tmp_path: Path, correct: list) -> list[str]:
    seq = [record(f"p{i}", correct=c) for i, c in enumerate(correct)]
    graded = [c for c in correct if c is not None]
    run = load_run(write_run(tmp_path / "seq", seq, accuracy=sum(graded) / len(graded)))
    text = build_report([run], tmp_path / "report.md", figures=False).read_text()
    return [line for line in text.splitlines() if "accuracy is over" in line]


def test_the_accuracy_note_appears_exactly_when_some_answers_are_ungraded(tmp_path):
    """R3 (a note on a fully graded run: "over 3 of 3, 0 could not be graded") and R5 (0/1 grades
    not counted as graded, as prompt_figures and the paired values count them)."""
    assert accuracy_notes(tmp_path / "all", [True, False, True]) == []
    [note] = accuracy_notes(tmp_path / "ints", [1, 0, None])
    assert "over 2 of 3 chains" in note and "1 could not be graded" in note


def case_study_table(lines: list[str]) -> tuple[list[dict[str, str]], list[str]]:
    rows = [line for line in lines if line.startswith("| ")]
    header = [c.strip() for c in rows[0].split("|")[1:-1]]
    cells = [dict(zip(header, [c.strip() for c in row.split("|")[1:-1]], strict=True)) for row in rows[1:]]
    return cells, [line for line in lines if line.startswith("- note:")]


def test_case_study_relative_cost_is_over_the_lowtemp_row(tmp_path):
    """R6 (× lowtemp inverted): a run's call time per prompt divided by lowtemp's, so the run that
    costs three times lowtemp reads 3."""
    lowtemp = [record(f"p{i}", calls=1, seconds=0.5) for i in range(2)]
    best = [record(f"p{i}", calls=1, seconds=1.5) for i in range(2)]
    runs = [
        load_run(write_run(tmp_path / "lowtemp", lowtemp, "none", sampler="lowtemp")),
        load_run(write_run(tmp_path / "bon", best, "none", sampler="best_of_n")),
    ]
    rows, _ = case_study_table(case_study_lines(runs))
    relative = {row["method"]: float(row["× lowtemp"]) for row in rows}
    assert relative == {"lowtemp": 1.0, "best_of_n": pytest.approx(3.0)}


def test_case_study_accuracy_is_over_the_graded_answers(tmp_path):
    """F2 (accuracy over every answer, ungraded ones counting as wrong): an ungraded answer is left
    out of the accuracy, as the run's own accuracy leaves it out."""
    answers = [record("p0", correct=True), record("p1", correct=None), record("p2", correct=False)]
    lowtemp = load_run(write_run(tmp_path / "lowtemp", answers, "none", sampler="lowtemp"))
    [row], notes = case_study_table(case_study_lines([lowtemp]))
    assert float(row["accuracy"]) == pytest.approx(0.5)
    assert any("accuracy is over 2 of 3" in note for note in notes)


def test_case_study_compares_answers_per_prompt_not_answers(tmp_path):
    """R11 (the note compares answer counts): runs on disjoint prompt sets with one answer per
    prompt draw alike per prompt; two answers per prompt against one is what the note is for."""
    one = [record(f"p{i}") for i in range(2)]
    other = [record(f"q{i}") for i in range(3)]
    two = [record(f"p{i}", c) for i in range(2) for c in range(2)]
    lowtemp = load_run(write_run(tmp_path / "lowtemp", one, "none", sampler="lowtemp"))
    apart = load_run(write_run(tmp_path / "apart", other, "none", sampler="best_of_n"))
    twice = load_run(write_run(tmp_path / "twice", two, "none", sampler="best_of_n"))
    _, notes = case_study_table(case_study_lines([lowtemp, apart]))
    assert any("share no prompt" in note for note in notes)
    assert not any("answers per prompt" in note for note in notes)
    _, notes = case_study_table(case_study_lines([lowtemp, twice]))
    assert any("different numbers of answers per prompt" in note for note in notes)


# --- eval/runs.py: speedup (read here, owned elsewhere) -------------------------------------------


def test_a_prompt_without_calls_is_left_out_of_its_sides_time_per_call():
    """S3 (such a prompt counted as 0 s per call): the docstring leaves it out of that side, so the
    variant's time per call is the other prompt's own, not half of it."""
    a = RunData(Path("a"), {}, [record("p0", calls=10, seconds=10.0), record("p1", calls=10, seconds=20.0)])
    b = RunData(Path("b"), {}, [record("p0", calls=0, seconds=0.0), record("p1", calls=4, seconds=6.0)])
    s = speedup(pair_chains(a, b))
    assert s.time_per_call_baseline == pytest.approx((1.0 + 2.0) / 2)
    assert s.time_per_call_variant == pytest.approx(1.5)
    assert s.time_per_call_increase == pytest.approx(1.5 / 1.5)
    assert s.speedup == pytest.approx(15.0 / 3.0)


# --- baselines ---------------------------------------------------------------------------------


def test_an_answer_is_cut_after_its_first_eos_with_every_statistic():
    """C2 (cut after the last EOS) and C3 (the entropies left uncut): what a baseline keeps of a
    result that runs past EOS (the engine check stops that today, the helper must not rely on it)."""
    n = 6
    result = SuffixResult(
        np.array([4, 2, 3, 2, 1, 0]), -np.arange(1.0, n + 1), -np.arange(2.0, n + 2), np.arange(n) / 10, np.ones((n, 1))
    )
    state = state_until_eos(result, {2})
    assert state.tokens.tolist() == [4, 2]
    for got, full in ((state.logp0, result.logp0), (state.logq, result.logq), (state.entropy, result.entropy)):
        assert got.tolist() == full[:2].tolist()
    assert state.logq_extra.shape == (2, 1)
    assert state_until_eos(result, set()).tokens.tolist() == result.tokens.tolist()


def test_best_of_n_ties_go_to_the_first_candidate(tmp_path):
    """B4 (ties to the last): on a uniform table every answer has the same log q, so the first
    candidate (the first request seed) is the answer, as the docstring says."""
    table = tmp_path / "uniform.json"
    table.write_text(json.dumps({"bos_logits": [0.0] * 4, "logits": [[0.0] * 4] * 4}))
    engine = ToyEngine(table)
    best = BestOfN(tau=0.5, num_samples=6)
    for chain_index in range(5):
        state, trace = best.sample(engine, [], ChainKey(1, 0, chain_index), BlockSchedule(3, 3, 0))
        assert len(set(trace.info["candidate_scores"])) == 1 and trace.info["selected"] == 0
        # Candidate 0 is the answer the first of the call's seeds gives on its own.
        again, _ = BestOfN(tau=0.5, num_samples=1).sample(
            engine, [], ChainKey(1, 0, chain_index), BlockSchedule(3, 3, 0)
        )
        assert state.tokens.tolist() == again.tokens.tolist()


def test_systematic_resampling_gives_each_particle_its_expected_share():
    """P9 (the uniform ignored: a fixed grid of positions): over u ~ U[0, 1), particle i gets P w_i
    copies on average, and floor or ceil of it each time."""
    weights = np.array([0.1, 0.0, 0.45, 0.3, 0.15])
    count = weights.shape[0]
    grid = (np.arange(4000) + 0.5) / 4000  # midpoints: the average over u in [0, 1)
    copies = np.array([np.bincount(systematic_resample(weights, u), minlength=count) for u in grid])
    np.testing.assert_allclose(copies.mean(axis=0), count * weights, atol=2e-3)
    assert np.all(copies >= np.floor(count * weights)) and np.all(copies <= np.ceil(count * weights))
    assert copies.sum(axis=1).tolist() == [count] * len(grid)


@pytest.mark.parametrize("u", [0.0, 0.5, np.nextafter(1.0, 0.0)])
@pytest.mark.parametrize("weights", [[0.0, 0.5, 0.0, 0.5, 0.0], [1.0, 0.0], [0.25, 0.75, 0.0, 0.0], [0.0] * 31 + [1.0]])
def test_systematic_resampling_never_draws_a_particle_of_weight_zero(weights, u):
    """P10 (side="left": a leading weight-0 particle drawn at u = 0.0, which rng.random() can
    return), and a defect of the original: at the largest uniform below 1, u + P - 1 rounds up
    to P, the last position is 1.0 and the search ran past the end, clipped onto the last
    particle, drawn even with weight 0 (an underflowed weight, a particle p0 rules out)."""
    weights = np.array(weights)
    drawn = systematic_resample(weights, float(u))
    assert drawn.shape == weights.shape and np.all(weights[drawn] > 0)


def test_the_final_pick_never_draws_a_particle_of_weight_zero():
    """P22 (side="left" in the final draw): u = 0.0 would pick a leading particle of weight 0."""
    weights = np.array([0.0, 0.0, 0.25, 0.0, 0.75])
    assert categorical(weights, 0.0) == 2
    assert categorical(weights, 0.25) == 4 and categorical(weights, np.nextafter(1.0, 0.0)) == 4
    hits = np.bincount([categorical(weights, u) for u in (np.arange(1000) + 0.5) / 1000], minlength=5)
    assert hits.tolist() == [0, 0, 250, 0, 750]


class EosFirstEngine(ToyEngine):
    """A toy LM whose first token is EOS (id 2) with probability 1 - 1e-21."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({2})


def test_power_smc_counts_only_the_blocks_that_made_a_call(tmp_path):
    """P24 (a block without a live particle counted as a round): once every particle has ended at
    EOS, no request is left and no model call is made, so the trace's rounds are the engine's calls."""
    table = tmp_path / "eos.json"
    table.write_text(json.dumps({"bos_logits": [0.0, 0.0, 50.0], "logits": [[0.0] * 3] * 3}))
    engine = EosFirstEngine(table)
    smc = PowerSMC(alpha=4.0, tau=0.5, num_particles=4, ramp_tokens=0, ess_threshold=0.5)
    calls = engine.stats.calls
    state, trace = smc.sample(engine, [], ChainKey(0, 0, 0), BlockSchedule(6, 2, 0))
    assert state.tokens.tolist() == [2] and len(trace.history) == 3
    assert engine.stats.calls - calls == trace.rounds == 1


def test_power_smc_resamples_only_when_the_ess_falls_below_the_threshold(toy):
    """P6 (`ess < threshold * P` -> `<=`): equal weights (alpha = tau = 1: q is the target) have
    ESS = P, which does not fall below 1.0 * P, so the population is never resampled."""
    smc = PowerSMC(alpha=1.0, tau=1.0, num_particles=4, ramp_tokens=0, ess_threshold=1.0)
    _, trace = smc.sample(toy, [], ChainKey(0, 0, 0), BlockSchedule(6, 2, 0))
    assert [record.ess for record in trace.history] == [4.0, 4.0, 4.0]
    assert not any(record.resampled for record in trace.history) and trace.info["resamples"] == 0


def test_power_smc_accepts_a_ramp_of_zero_tokens():
    """I3 (ramp_tokens must be >= 1): R = 0 is documented as "alpha from the start"."""
    settings = SamplerSettings("power_smc", 4.0, 0.25, 8, 2, 0, {"ramp_tokens": 0})
    assert build_baseline(settings).ramp_tokens == 0


# --- engines/token_sampling.py and engines/toy.py ---------------------------------------------------


def test_log_softmax_is_row_wise_whatever_the_other_rows_hold():
    """TS8 (the maximum over the whole array): the law tests take log_softmax of the whole toy
    table at once, so a row far below another must not underflow to -inf."""
    row = np.array([0.5, -1.0, 2.0])
    table = np.stack([row, row - 2000.0, row + 2000.0])
    expected = row - np.log(np.sum(np.exp(row)))
    for got in log_softmax(table):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"bos_logits": [0.0, 1.0], "logits": [[0.0, float("nan")], [0.0, 1.0]]}, "non-finite"),
        ({"bos_logits": [0.0, float("inf")], "logits": [[0.0, 0.0], [0.0, 1.0]]}, "non-finite"),
        ({"bos_logits": [0.0, 1.0], "logits": [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]}, "shape VxV"),
        ({"bos_logits": [0.0, 1.0], "logits": [[0.0, 1.0]]}, "shape VxV"),
        ({"bos_logits": [], "logits": []}, "V >= 1"),
        ({"logits": [[0.0]]}, "is not a toy table"),
    ],
)
def test_a_malformed_toy_table_is_refused(tmp_path, table, message):
    """Y9 (non-finite logits accepted) and Y10 (the shape check dropped): a NaN row would sample
    token 0 forever and a table of the wrong shape would index past its rows."""
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))  # json writes NaN and Infinity, which json.loads reads back
    with pytest.raises(ToyTableError, match=message):
        load_toy_table(path)


def test_the_toy_table_scale_multiplies_the_seeded_logits(tmp_path):
    """Y11 (the scale ignored): one seed gives the same normal draws, times the scale; scale 0 is
    the uniform law."""
    unit = load_toy_table(write_random_toy_table(tmp_path / "unit.json", 4, seed=3, scale=1.0))
    sharp = load_toy_table(write_random_toy_table(tmp_path / "sharp.json", 4, seed=3, scale=2.5))
    flat = load_toy_table(write_random_toy_table(tmp_path / "flat.json", 4, seed=3, scale=0.0))
    for u, s, f in zip(unit, sharp, flat, strict=True):
        np.testing.assert_allclose(s, 2.5 * u, rtol=1e-15)
        assert np.all(f == 0.0) and np.std(u) > 0.1
