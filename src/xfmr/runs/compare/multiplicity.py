"""Corrections for every test and interval one page reports, taken together.

    benjamini_hochberg       p-values adjusted to bound the false discovery rate
    bonferroni               p-values times their number, at most 1
    correct_p_values         every p-value a page reports, corrected together, in order
    simultaneous_confidence  the level at which each of a page's m intervals is computed

Which a page should use: where it prints intervals beside significance, Bonferroni, with each
interval at simultaneous_confidence(m): a t interval at level 1 - α/m excludes 0 exactly when
its test's p < α/m, that is when the Bonferroni-corrected p < α, so no 'significant' disagrees
with its interval, and all m intervals hold together with probability at least 1 - α. Holm
(`stats.holm`) rejects all Bonferroni does and more at the same family-wise error rate, but
has no intervals of that kind: a Holm-significant difference can have a Bonferroni interval
that holds 0; use it where only p-values are printed. Benjamini-Hochberg bounds the expected
share of false findings among those called significant, not the chance of any: for a page that
screens many comparisons and says that is what its 'significant' means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from xfmr.runs.compare.stats import CONFIDENCE, holm

Method = Literal["bonferroni", "holm", "bh"]
METHODS = ("bonferroni", "holm", "bh")


def bonferroni(p_values: Sequence[float]) -> list[float]:
    """min(1, m * p) for each of the m p-values (Bonferroni; Dunn 1961), in the given order;
    NaN stays NaN and does not count in m, as in `stats.holm`."""
    tested = sum(1 for p in p_values if not math.isnan(p))
    return [p if math.isnan(p) else min(1.0, tested * p) for p in p_values]


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini & Hochberg's (1995) step-up adjustment, in the given order: the i-th smallest
    of m p-values becomes min over j >= i of min(1, m * p_(j) / j), so that calling significant
    every adjusted p below q keeps the expected share of false discoveries at most q (for
    independent or positively dependent tests). NaN stays NaN and does not count in m."""
    ranked = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 1.0
    for rank in range(len(ranked), 0, -1):  # from the largest p down: the running minimum
        p, index = ranked[rank - 1]
        running = min(running, len(ranked) * p / rank)
        adjusted[index] = running
    return adjusted


def correct_p_values(p_values: Sequence[float], *, method: Method) -> list[float]:
    """Every p-value a page reports, corrected as one family, in the order given: feed it all
    of them (each difference, each exponent difference, each equivalence test), not one
    table's. `method`: "bonferroni" where the page prints intervals beside the p-values (with
    `simultaneous_confidence`), "holm" where it prints p-values alone, "bh" for a false
    discovery rate (see the module's docstring). NaN (a test that could not run) stays NaN.

    Raises:
        ValueError: an unknown method, or a p-value outside [0, 1].
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}: give one of {METHODS}")
    wrong = [p for p in p_values if not (math.isnan(p) or 0 <= p <= 1)]
    if wrong:
        raise ValueError(f"p-values lie in [0, 1] (NaN for a test that did not run): {wrong}")
    correct = {"bonferroni": bonferroni, "holm": holm, "bh": benjamini_hochberg}[method]
    return correct(p_values)


def simultaneous_confidence(intervals: int, *, confidence: float = CONFIDENCE) -> float:
    """The level 1 - (1 - confidence) / m at which to compute each of a page's m intervals, so
    that all m cover their true values together with probability at least `confidence`
    (Bonferroni's inequality; Dunn 1961), and each excludes 0 exactly when its Bonferroni-
    corrected p is below 1 - confidence.

    Raises:
        ValueError: fewer than one interval, or a confidence outside (0, 1).
    """
    if isinstance(intervals, bool) or not isinstance(intervals, int) or intervals < 1:
        raise ValueError(f"intervals={intervals!r}: give the number of intervals, at least 1")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: give a level between 0 and 1, e.g. 0.95")
    return 1 - (1 - confidence) / intervals
