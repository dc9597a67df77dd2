"""Is a setting better than the baseline, or is it the seed? scipy does the maths:

    mean_interval   the 95% confidence interval of a setting's mean, Student's t with n - 1 df
    welch           the difference of two settings' means, its 95% interval with the
                    Welch-Satterthwaite df, Welch's t-test p-value (no equal variances assumed)
                    and Cohen's d
    paired          the mean of per-seed differences (runs that share a seed share their
                    initialisation and data order), its 95% t interval, the paired t-test
                    p-value and d_z
    equivalence     two one-sided tests (TOST) that the difference lies within ±margin
    holm            p-values corrected for testing every setting against the baseline at once
    seeds_needed    how many seeds would detect a given difference with 80% power

scipy loads on the first call, never for a table of single runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # a corrected p-value below this is marked significant
POWER = 0.8  # the chance of detecting a difference that `seeds_needed` plans for
MIN_RUNS = 2  # a sample std, and so any interval or test, needs two values
MOST_SEEDS = 1_000_000  # `seeds_needed` gives up beyond this


@dataclass(frozen=True)
class Difference:
    """A setting's mean minus the baseline's, as the paired or Welch's t-test sees it.

    Attributes:
        delta: the difference of means (paired: the mean of the per-seed differences).
        low: the lower end of its 95% interval.
        high: the upper end.
        p_value: the two-sided p-value of the test, uncorrected.
        effect_size: Cohen's d (delta / pooled sd) for Welch, d_z (delta / sd of the
            differences) for paired.
        spread: the sd the effect size divides by, which `seeds_needed` plans with.
        pairs: the number of seeds both settings share when paired; None for Welch.
        stderr: the standard error of delta, and df: the degrees of freedom of its t (Welch-
            Satterthwaite for Welch, n - 1 paired), from which `verdicts.tost` tests
            equivalence; NaN where unknown.
    """

    delta: float
    low: float
    high: float
    p_value: float
    effect_size: float
    spread: float
    pairs: int | None = None
    stderr: float = math.nan
    df: float = math.nan

    @property
    def test(self) -> str:
        return "Welch" if self.pairs is None else f"paired (n={self.pairs})"


def mean_interval(
    values: Sequence[float], *, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """The 95% interval of the mean: mean ± t_{0.975, n-1} * s / sqrt(n); None below two.
    `confidence` other than 0.95 (a page's simultaneous level) changes the t quantile. Values
    that are all equal (s = 0) give the mean itself at both ends, where scipy gives NaN."""
    if len(values) < MIN_RUNS:
        return None
    from scipy import stats

    mean, sem = _mean(values), stats.sem(values)
    if sem == 0:
        return mean, mean
    low, high = stats.t.interval(confidence, len(values) - 1, loc=mean, scale=sem)
    return float(low), float(high)


def welch(
    values: Sequence[float], baseline: Sequence[float], *, confidence: float = CONFIDENCE
) -> Difference | None:
    """mean(values) - mean(baseline), its 95% interval (at `confidence`) and p-value under
    Welch's t-test (Welch 1947), and Cohen's d with the pooled sd (Cohen 1988, ch. 2); None
    when either side has fewer than two values."""
    if len(values) < MIN_RUNS or len(baseline) < MIN_RUNS:
        return None
    from scipy import stats

    test = stats.ttest_ind(values, baseline, equal_var=False)
    interval = test.confidence_interval(confidence)  # Welch-Satterthwaite df, as the test's
    delta = _mean(values) - _mean(baseline)
    pooled = math.sqrt(
        ((len(values) - 1) * _variance(values) + (len(baseline) - 1) * _variance(baseline))
        / (len(values) + len(baseline) - 2)
    )
    return Difference(
        delta=delta,
        low=float(interval.low),
        high=float(interval.high),
        p_value=float(test.pvalue),
        effect_size=_ratio(delta, pooled),
        spread=pooled,
        stderr=math.sqrt(_variance(values) / len(values) + _variance(baseline) / len(baseline)),
        df=float(test.df),
    )


def paired(
    values: Sequence[float], baseline: Sequence[float], *, confidence: float = CONFIDENCE
) -> Difference | None:
    """The mean of values[i] - baseline[i] (the i-th of each from the same seed), its 95% t
    interval (at `confidence`) and the paired t-test's p-value (Student's t on the differences, n - 1 df), and
    d_z = mean / sd of the differences (Cohen 1988, ch. 2.3); None below two pairs."""
    assert len(values) == len(baseline), "paired values come in pairs"
    if len(values) < MIN_RUNS:
        return None
    from scipy import stats

    test = stats.ttest_rel(values, baseline)
    interval = test.confidence_interval(confidence)
    differences = [value - base for value, base in zip(values, baseline, strict=True)]
    delta, spread = _mean(differences), math.sqrt(_variance(differences))
    return Difference(
        delta=delta,
        low=float(interval.low),
        high=float(interval.high),
        p_value=float(test.pvalue),
        effect_size=_ratio(delta, spread),
        spread=spread,
        pairs=len(values),
        stderr=spread / math.sqrt(len(values)),
        df=len(values) - 1.0,
    )


def equivalence(
    values: Sequence[float], baseline: Sequence[float], margin: float, *, pair: bool
) -> float:
    """The p-value of two one-sided tests (Schuirmann 1987) that -margin < mean difference <
    margin, by the paired t-test when `pair` (values[i] and baseline[i] share a seed) else
    Welch's: the larger of the p-values of `difference > -margin` and `difference < margin`.
    A shifted sample is the same test against a shifted null, so scipy's own tests serve."""
    from scipy import stats

    def one_sided(shift: float, alternative: str) -> float:
        shifted = [value + shift for value in values]
        if pair:
            return float(stats.ttest_rel(shifted, baseline, alternative=alternative).pvalue)
        test = stats.ttest_ind(shifted, baseline, equal_var=False, alternative=alternative)
        return float(test.pvalue)

    return max(one_sided(margin, "greater"), one_sided(-margin, "less"))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down correction (Holm 1979), in the given order: the i-th smallest of m
    p-values times (m - i + 1), never below the one before it, at most 1. It bounds the chance
    of any false 'significant' among the m tests by ALPHA, with no assumption about how they
    depend on each other (they share the baseline). NaN (a test with no spread) stays NaN and
    does not count in m."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    corrected = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        corrected[index] = running
    return corrected


def power(effect_size: float, seeds: int, *, pair: bool, alpha: float = ALPHA) -> float:
    """The chance that a two-sided t-test at `alpha` with `seeds` per setting rejects when the
    true difference is `effect_size` sds: the mass of the noncentral t beyond the critical
    values (Cohen 1988, ch. 2). Two samples: df = 2n - 2, noncentrality d * sqrt(n / 2);
    paired: df = n - 1, noncentrality d_z * sqrt(n)."""
    from scipy import stats

    df = seeds - 1 if pair else 2 * seeds - 2
    noncentrality = abs(effect_size) * math.sqrt(seeds if pair else seeds / 2)
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(
        stats.nct.sf(critical, df, noncentrality) + stats.nct.cdf(-critical, df, noncentrality)
    )


def seeds_needed(
    difference: float, spread: float, *, pair: bool, alpha: float = ALPHA
) -> int | None:
    """The fewest seeds per setting at which the t-test (paired, or two-sample with the pooled
    `spread`) detects `difference` with POWER at `alpha`, two-sided; the noncentral t, not the
    normal approximation, which undercounts at the few seeds a sweep can afford. None without
    a spread to plan with, or beyond MOST_SEEDS. Power grows with n, so doubling then
    bisecting finds the first n that reaches it."""
    if not (math.isfinite(spread) and spread > 0 and math.isfinite(difference)):
        return None
    effect_size = difference / spread

    def enough(seeds: int) -> bool:
        return power(effect_size, seeds, pair=pair, alpha=alpha) >= POWER

    low, high = MIN_RUNS - 1, MIN_RUNS  # enough(low) is false: no test below MIN_RUNS
    while not enough(high):
        if high > MOST_SEEDS:
            return None
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    mean = _mean(values)
    return sum((value - mean) ** 2 for value in values) / (len(values) - 1)


def _ratio(delta: float, spread: float) -> float:
    """delta / spread; NaN where there is no spread to measure it by."""
    return delta / spread if spread > 0 else float("nan")
