"""Is a setting better than the baseline, or is it the seed? scipy does the maths:

    mean_interval   the 95% confidence interval of a setting's mean, Student's t with n - 1 df
    welch           the difference of two settings' means, its 95% interval with the
                    Welch-Satterthwaite df, and Welch's t-test p-value (no equal variances assumed)
    holm            p-values corrected for testing every setting against the baseline at once

scipy loads on the first call, never for a table of single runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # a corrected p-value below this is marked significant
MIN_RUNS = 2  # a sample std, and so any interval or test, needs two values


@dataclass(frozen=True)
class Difference:
    """A setting's mean minus the baseline's, as Welch's t-test sees it."""

    delta: float
    low: float
    high: float
    p_value: float


def mean_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95% interval of the mean: mean ± t_{0.975, n-1} * s / sqrt(n); None below two."""
    if len(values) < MIN_RUNS:
        return None
    from scipy import stats

    low, high = stats.t.interval(
        CONFIDENCE, len(values) - 1, loc=_mean(values), scale=stats.sem(values)
    )
    return float(low), float(high)


def welch(values: Sequence[float], baseline: Sequence[float]) -> Difference | None:
    """mean(values) - mean(baseline), its 95% interval and p-value under Welch's t-test (Welch
    1947); None when either side has fewer than two values."""
    if len(values) < MIN_RUNS or len(baseline) < MIN_RUNS:
        return None
    from scipy import stats

    test = stats.ttest_ind(values, baseline, equal_var=False)
    interval = test.confidence_interval(CONFIDENCE)  # Welch-Satterthwaite df, as the test's
    return Difference(
        delta=_mean(values) - _mean(baseline),
        low=float(interval.low),
        high=float(interval.high),
        p_value=float(test.pvalue),
    )


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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
