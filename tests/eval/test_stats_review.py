"""Review fixes for the paired/pooled TOST: rounding-level spreads and invalid margins."""

from __future__ import annotations

import math

import numpy as np
import pytest

from presto.eval.tost import paired_tost, pooled_tost


def shifted_pair(rng: np.random.Generator):
    baseline = rng.normal(size=40)
    return paired_tost(baseline, baseline + 0.6 * baseline.std(ddof=1) + rng.normal(scale=0.1, size=40))


def test_differences_equal_up_to_rounding_are_an_exact_pair():
    # The same per-prompt values reached through another summation order (e.g. a prompt's
    # chains averaged in another order) differ in the last bit only. Such a pair must pool like
    # identical values (equal weights), not get a weight of ~1e34 that silences every other pair.
    rng = np.random.default_rng(2)
    values = rng.normal(-0.5, 0.05, size=40)
    exact = paired_tost(values, values.copy())
    near = paired_tost(values, (values * 3.0 + values * 4.0) / 7.0)
    assert not np.array_equal(values, (values * 3.0 + values * 4.0) / 7.0)  # the test needs rounding noise
    assert near.sd_diff == 0 and near.se == 0 and near.equivalent
    shifted = shifted_pair(rng)
    with_exact, with_near = pooled_tost([exact, shifted]), pooled_tost([near, shifted])
    assert not with_exact.equivalent
    assert with_near.equivalent == with_exact.equivalent
    assert with_near.estimate == pytest.approx(with_exact.estimate, abs=1e-12)
    assert with_near.se == pytest.approx(with_exact.se, rel=1e-12)


def test_a_real_small_spread_is_kept():
    rng = np.random.default_rng(3)
    values = rng.normal(-0.5, 0.05, size=40)
    result = paired_tost(values, values + rng.normal(scale=1e-9, size=40))
    assert result.sd_diff > 0 and result.se > 0


@pytest.mark.parametrize("options", [{"margin": math.nan}, {"margin_sd": math.nan}, {"margin_sd": -0.2}])
def test_an_invalid_margin_is_an_error_not_an_undefined_test(options):
    # A NaN margin used to come back as p_eq NaN, i.e. "undefined: the baseline has no spread".
    values = np.array([0.0, 1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="margin"):
        paired_tost(values, values + 0.1, **options)


@pytest.mark.parametrize("margin_sd", [math.nan, -0.2])
def test_an_invalid_pooled_margin_is_an_error(margin_sd):
    rng = np.random.default_rng(4)
    with pytest.raises(ValueError, match="margin"):
        pooled_tost([shifted_pair(rng), shifted_pair(rng)], margin_sd=margin_sd)
