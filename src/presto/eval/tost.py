"""Paired equivalence tests (TOST) for "PreSTO did not change the samples".

A difference test cannot show that two samplers agree; an equivalence test can. For
paired values (baseline a_i, variant b_i: same prompt, same chain index) with differences
d_i = b_i - a_i and mean mu_d, the two one-sided tests (Schuirmann) reject

    H0: |mu_d| >= delta   in favour of   H1: |mu_d| < delta

when both one-sided paired t-tests reject: H0_lower mu_d <= -delta and H0_upper
mu_d >= delta. p_eq is the larger of their p-values; p_eq < level is the same as the
(1 - 2 level) confidence interval of mu_d lying inside (-delta, delta). The margin delta
is 0.2 standard deviations of the baseline's statistic across units (a conventional small
effect), as in the paper's Case Study 3.

A margin of 0.2 SDs is undefined when the baseline has no spread (every unit has the same
value, e.g. chains that all reach the same answer): such a test is reported as undefined
(``p_eq`` NaN, not equivalent) rather than "not equivalent". Spreads below rounding
(``SD_TOLERANCE`` relative to the values), of the baseline or of the differences, count as
none, so the verdict does not hang on the last bits of an average: equal per-unit values
reached through another summation order are an exact pair, as identical values are.

Several pairs (datasets, models) are pooled with a fixed-effect average of standardized
mean differences (each pair's mean difference and standard error divided by its baseline
SD, weighted by inverse variance) and tested against the same margin, in SD units, with
normal (z) one-sided tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_MARGIN_SD = 0.2
DEFAULT_LEVEL = 0.05
SD_TOLERANCE = 1e-12  # relative: a baseline SD below this times the values' scale is rounding


def check_level(level: float) -> float:
    """The TOST level must lie in (0, 0.5): the (1 - 2 level) interval has to exist."""
    if not 0 < level < 0.5:
        raise ValueError(f"the equivalence level must be in (0, 0.5), got {level}")
    return level


def interval_percent(level: float) -> str:
    """Name of the (1 - 2 level) confidence interval, e.g. '90%' for level 0.05."""
    return f"{100 * (1 - 2 * level):g}%"


@dataclass(frozen=True)
class TostResult:
    """A paired TOST of variant minus baseline."""

    n: int
    mean_diff: float
    sd_diff: float
    se: float
    baseline_sd: float
    margin: float  # delta, in the statistic's units
    df: int
    t_lower: float  # statistic of H0: mu_d <= -delta
    p_lower: float
    t_upper: float  # statistic of H0: mu_d >= +delta
    p_upper: float
    p_eq: float
    ci_low: float  # (1 - 2 level) confidence interval of mu_d
    ci_high: float
    level: float
    equivalent: bool

    @property
    def defined(self) -> bool:
        """False when the margin is undefined (baseline without spread)."""
        return not math.isnan(self.p_eq)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PooledResult:
    """Fixed-effect pooled standardized mean difference and its TOST (in baseline SD units)."""

    pairs: int
    estimate: float
    se: float
    margin_sd: float
    z_lower: float
    p_lower: float
    z_upper: float
    p_upper: float
    p_eq: float
    ci_low: float
    ci_high: float
    level: float
    equivalent: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _one_sided(mean: float, se: float, margin: float, df: float | None) -> tuple[float, float, float, float]:
    """(t_lower, p_lower, t_upper, p_upper); df=None uses the normal law.

    With a zero standard error the mean is known exactly: each null is rejected with p=0
    when the mean lies strictly on the alternative's side, else kept with p=1.
    """
    from scipy import stats

    if se == 0:
        lower = math.inf if mean > -margin else -math.inf
        upper = -math.inf if mean < margin else math.inf
        return lower, 0.0 if mean > -margin else 1.0, upper, 0.0 if mean < margin else 1.0
    law = stats.norm if df is None else stats.t(df)
    t_lower = (mean + margin) / se
    t_upper = (mean - margin) / se
    return t_lower, float(law.sf(t_lower)), t_upper, float(law.cdf(t_upper))


def paired_tost(
    baseline: Sequence[float] | np.ndarray,
    variant: Sequence[float] | np.ndarray,
    *,
    margin_sd: float = DEFAULT_MARGIN_SD,
    margin: float | None = None,
    level: float = DEFAULT_LEVEL,
) -> TostResult:
    """TOST on ``variant - baseline``; the margin is ``margin_sd`` baseline SDs unless given.

    Without a given margin and with a baseline SD of zero (within ``SD_TOLERANCE``) the
    test is undefined: ``p_eq`` is NaN and ``equivalent`` False.
    """
    from scipy import stats

    check_level(level)
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(variant, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired samples need equal 1-d shapes, got {a.shape} and {b.shape}")
    if a.shape[0] < 2:
        raise ValueError(f"a paired t-test needs at least 2 pairs, got {a.shape[0]}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired samples must be finite")
    if margin is None and not margin_sd >= 0:  # `not >=` also refuses NaN
        raise ValueError(f"the margin in baseline SDs must be >= 0, got {margin_sd}")
    d = b - a
    n = int(d.shape[0])
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    # Differences that are equal up to rounding (the same values summed in another order)
    # are an exact pair: a spread of ~1e-17 would otherwise give it a pooled weight of ~1e34.
    if sd <= SD_TOLERANCE * max(1.0, float(np.abs(a).max()), float(np.abs(b).max())):
        sd = 0.0
    se = sd / math.sqrt(n)
    baseline_sd = float(a.std(ddof=1))
    if baseline_sd <= SD_TOLERANCE * max(1.0, float(np.abs(a).max())):
        baseline_sd = 0.0
    delta = margin_sd * baseline_sd if margin is None else float(margin)
    if not delta >= 0:  # a NaN margin would read as "undefined: no baseline spread"
        raise ValueError(f"the margin must be >= 0, got {delta}")
    t_lower, p_lower, t_upper, p_upper = _one_sided(mean, se, delta, n - 1)
    half = float(stats.t(n - 1).ppf(1 - level)) * se
    p_eq = max(p_lower, p_upper)
    if margin is None and baseline_sd == 0:
        p_eq = math.nan  # a margin of 0.2 x 0: no equivalence question to answer
    return TostResult(
        n=n,
        mean_diff=mean,
        sd_diff=sd,
        se=se,
        baseline_sd=baseline_sd,
        margin=delta,
        df=n - 1,
        t_lower=t_lower,
        p_lower=p_lower,
        t_upper=t_upper,
        p_upper=p_upper,
        p_eq=p_eq,
        ci_low=mean - half,
        ci_high=mean + half,
        level=level,
        equivalent=bool(p_eq < level),
    )


def pooled_tost(
    results: Sequence[TostResult], *, margin_sd: float = DEFAULT_MARGIN_SD, level: float = DEFAULT_LEVEL
) -> PooledResult:
    """Fixed-effect pooling of several pairs' standardized mean differences, then TOST.

    Each pair contributes m_j = mean_j / sd_j with standard error se_j / sd_j (sd_j: its
    baseline SD) and weight 1 / (se_j / sd_j)^2. Inverse-variance weights are infinite for
    a pair whose differences are all equal (standard error 0, e.g. identical chains), and
    letting such pairs alone decide would ignore every other pair; so when one is present
    the pairs are averaged with equal weights instead, with standard error
    sqrt(sum (se_j / sd_j)^2) / J (exact for independent pairs).
    """
    from scipy import stats

    check_level(level)
    if not margin_sd >= 0:  # `not >=` also refuses NaN
        raise ValueError(f"the margin in baseline SDs must be >= 0, got {margin_sd}")
    if not results:
        raise ValueError("pooling needs at least one pair")
    usable = [r for r in results if r.baseline_sd > 0]
    if not usable:
        raise ValueError("no pair has a baseline with positive standard deviation; cannot standardize")
    m = np.array([r.mean_diff / r.baseline_sd for r in usable])
    s = np.array([r.se / r.baseline_sd for r in usable])
    if (s == 0).any():
        estimate, se = float(m.mean()), float(math.sqrt(np.sum(s**2)) / len(s))
    else:
        weights = 1.0 / s**2
        estimate = float(np.sum(weights * m) / np.sum(weights))
        se = float(1.0 / math.sqrt(np.sum(weights)))
    z_lower, p_lower, z_upper, p_upper = _one_sided(estimate, se, margin_sd, None)
    half = float(stats.norm.ppf(1 - level)) * se
    p_eq = max(p_lower, p_upper)
    return PooledResult(
        pairs=len(usable),
        estimate=estimate,
        se=se,
        margin_sd=margin_sd,
        z_lower=z_lower,
        p_lower=p_lower,
        z_upper=z_upper,
        p_upper=p_upper,
        p_eq=p_eq,
        ci_low=estimate - half,
        ci_high=estimate + half,
        level=level,
        equivalent=bool(p_eq < level),
    )
