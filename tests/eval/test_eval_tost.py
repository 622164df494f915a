"""Paired TOST and its pooled version: hand-computed cases and the statsmodels/scipy t-tests."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.weightstats import ttost_paired

from presto.eval.tost import paired_tost, pooled_tost

BASELINE = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
DIFF = np.array([0.1, -0.1, 0.2, 0.0, 0.3])


def test_hand_computed_case():
    result = paired_tost(BASELINE, BASELINE + DIFF, margin=1.0)
    # mean 0.1; SD sqrt(0.1 / 4); SE = SD / sqrt(5) = sqrt(0.005)
    se = math.sqrt(0.005)
    assert result.n == 5 and result.df == 4
    assert result.mean_diff == pytest.approx(0.1, abs=1e-12)
    assert result.sd_diff == pytest.approx(math.sqrt(0.025), abs=1e-12)
    assert result.se == pytest.approx(se, abs=1e-12)
    assert result.t_lower == pytest.approx(1.1 / se, abs=1e-9)
    assert result.t_upper == pytest.approx(-0.9 / se, abs=1e-9)
    assert result.p_lower == pytest.approx(stats.t(4).sf(1.1 / se), rel=1e-9)
    assert result.p_upper == pytest.approx(stats.t(4).cdf(-0.9 / se), rel=1e-9)
    assert result.p_eq == max(result.p_lower, result.p_upper) and result.equivalent
    half = stats.t(4).ppf(0.95) * se
    assert (result.ci_low, result.ci_high) == pytest.approx((0.1 - half, 0.1 + half))


def test_default_margin_is_a_fifth_of_the_baseline_sd():
    result = paired_tost(BASELINE, BASELINE + DIFF)
    assert result.baseline_sd == pytest.approx(math.sqrt(2.5))
    assert result.margin == pytest.approx(0.2 * math.sqrt(2.5))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matches_statsmodels_ttost_paired(seed):
    rng = np.random.default_rng(seed)
    baseline = rng.normal(size=40)
    variant = baseline + rng.normal(scale=0.3, size=40) + (0.05 if seed % 2 else -0.2)
    result = paired_tost(baseline, variant, margin=0.25)
    p_eq, (t1, p1, df1), (t2, p2, df2) = ttost_paired(variant, baseline, -0.25, 0.25)
    assert result.p_eq == pytest.approx(p_eq, rel=1e-9)
    assert (result.t_lower, result.p_lower, result.df) == pytest.approx((t1, p1, df1), rel=1e-9)
    assert (result.t_upper, result.p_upper, result.df) == pytest.approx((t2, p2, df2), rel=1e-9)


def test_matches_scipy_one_sided_paired_t_tests():
    rng = np.random.default_rng(9)
    baseline = rng.normal(size=30)
    variant = baseline + rng.normal(scale=0.5, size=30)
    delta = 0.3
    result = paired_tost(baseline, variant, margin=delta)
    lower = stats.ttest_rel(variant + delta, baseline, alternative="greater")  # H0: mu_d <= -delta
    upper = stats.ttest_rel(variant - delta, baseline, alternative="less")  # H0: mu_d >= +delta
    assert result.p_lower == pytest.approx(lower.pvalue, rel=1e-9)
    assert result.p_upper == pytest.approx(upper.pvalue, rel=1e-9)
    assert result.t_lower == pytest.approx(lower.statistic, rel=1e-9)


def test_equivalence_iff_the_90_percent_interval_is_inside_the_margin():
    rng = np.random.default_rng(5)
    for shift in np.linspace(-0.6, 0.6, 13):
        baseline = rng.normal(size=50)
        variant = baseline + shift + rng.normal(scale=0.4, size=50)
        result = paired_tost(baseline, variant, margin=0.3)
        inside = result.ci_low > -0.3 and result.ci_high < 0.3
        assert result.equivalent == inside


def test_identical_samples_are_equivalent_and_a_constant_shift_is_judged_exactly():
    same = paired_tost(BASELINE, BASELINE.copy())
    assert same.se == 0 and same.p_eq == 0 and same.equivalent
    shifted = paired_tost(BASELINE, BASELINE + 10.0)
    assert shifted.p_eq == 1 and not shifted.equivalent


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least 2"):
        paired_tost([1.0], [1.0])
    with pytest.raises(ValueError, match="equal"):
        paired_tost([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        paired_tost([1.0, float("nan")], [1.0, 2.0])


def test_pooled_fixed_effect_by_hand():
    rng = np.random.default_rng(4)
    pairs = []
    for scale in (1.0, 3.0):
        baseline = scale * rng.normal(size=60)
        pairs.append(paired_tost(baseline, baseline + scale * rng.normal(scale=0.2, size=60)))
    pooled = pooled_tost(pairs)
    m = np.array([p.mean_diff / p.baseline_sd for p in pairs])
    s = np.array([p.se / p.baseline_sd for p in pairs])
    w = 1 / s**2
    estimate, se = float(np.sum(w * m) / np.sum(w)), float(1 / np.sqrt(np.sum(w)))
    assert pooled.pairs == 2
    assert pooled.estimate == pytest.approx(estimate) and pooled.se == pytest.approx(se)
    assert pooled.p_lower == pytest.approx(stats.norm.sf((estimate + 0.2) / se))
    assert pooled.p_upper == pytest.approx(stats.norm.cdf((estimate - 0.2) / se))
    assert pooled.equivalent == (pooled.p_eq < 0.05)


def test_pooling_one_pair_is_its_standardized_z_test():
    rng = np.random.default_rng(8)
    baseline = rng.normal(size=200)
    single = paired_tost(baseline, baseline + rng.normal(scale=0.3, size=200))
    pooled = pooled_tost([single])
    assert pooled.estimate == pytest.approx(single.mean_diff / single.baseline_sd)
    assert pooled.se == pytest.approx(single.se / single.baseline_sd)


def test_pooling_more_pairs_narrows_the_interval():
    rng = np.random.default_rng(1)
    pairs = []
    for _ in range(4):
        baseline = rng.normal(size=30)
        pairs.append(paired_tost(baseline, baseline + rng.normal(scale=0.5, size=30)))
    assert pooled_tost(pairs).se < min(p.se / p.baseline_sd for p in pairs)
    with pytest.raises(ValueError):
        pooled_tost([])


def test_an_exact_pair_does_not_silence_the_others():
    # Identical chains (all differences 0) next to a pair that differs by 0.6 SD: equal weights.
    exact = paired_tost(BASELINE, BASELINE.copy())
    rng = np.random.default_rng(2)
    baseline = rng.normal(size=40)
    shifted = paired_tost(baseline, baseline + 0.6 * baseline.std(ddof=1) + rng.normal(scale=0.1, size=40))
    pooled = pooled_tost([exact, shifted])
    s = shifted.se / shifted.baseline_sd
    assert pooled.estimate == pytest.approx(shifted.mean_diff / shifted.baseline_sd / 2)
    assert pooled.se == pytest.approx(s / 2)
    assert not pooled.equivalent  # the old rule reported 0 +- 0, equivalent
    assert pooled_tost([exact, exact]).se == 0 and pooled_tost([exact, exact]).equivalent


def test_a_baseline_without_spread_makes_the_test_undefined():
    flat = np.full(6, -0.75)
    result = paired_tost(flat, flat.copy())
    assert result.baseline_sd == 0 and math.isnan(result.p_eq) and not result.equivalent and not result.defined
    # Averages of equal values can carry a rounding spread (~1e-17): still no spread.
    noisy = flat + np.array([0, 1, 0, 1, 0, 1]) * 1e-17
    assert not paired_tost(noisy, noisy.copy()).defined
    # An explicit margin keeps the test defined.
    assert paired_tost(flat, flat.copy(), margin=0.1).equivalent
    assert paired_tost(BASELINE, BASELINE + DIFF).defined


@pytest.mark.parametrize("level", [0.0, 0.5, 0.7, -0.1])
def test_the_level_must_leave_an_interval(level):
    with pytest.raises(ValueError, match="level"):
        paired_tost(BASELINE, BASELINE + DIFF, level=level)
