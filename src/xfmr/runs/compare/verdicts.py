"""A verdict beside every difference: a difference that is not significant is not shown to be
absent, so each is also tested for equivalence within a margin fixed before the runs are seen.

    tost                 the two one-sided tests' p-value of a Difference against ±margin
    verdict              the words from the two p-values (corrected by the page, if it corrects)
    equivalence_verdict  the words for a Difference, uncorrected
    samples_verdict      the words for two samples, paired by seed or by Welch's test

The margin must be stated in advance (a constant in the page's script, with its reason): one
chosen after seeing the interval can make any difference 'equivalent'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xfmr.runs.compare.stats import ALPHA, MIN_RUNS, Difference, equivalence, paired, welch

INCONCLUSIVE = "inconclusive (neither)"


def tost(difference: Difference, margin: float) -> float:
    """Schuirmann's (1987) two one-sided tests that -margin < Δ < margin, from the Difference's
    estimate, standard error and df: the larger of P(T > (Δ + margin) / se) (against Δ <=
    -margin) and P(T < (Δ - margin) / se) (against Δ >= margin), T Student's t on its df. The
    same test as `stats.equivalence` on the samples the Difference came from. NaN where the
    difference has no spread.

    Raises:
        ValueError: a margin that is not positive and finite, or a Difference without its
            standard error and df.
    """
    from scipy import stats

    _check_margin(margin)
    se, df = difference.stderr, difference.df
    if se == 0:
        return math.nan
    if math.isnan(se) or math.isnan(df):
        raise ValueError("this Difference carries no standard error and df (stderr, df): make "
                         "it with stats.welch, stats.paired or an exponent difference")  # fmt: skip
    above_low = stats.t.sf((difference.delta + margin) / se, df)
    below_high = stats.t.cdf((difference.delta - margin) / se, df)
    return float(max(above_low, below_high))


def verdict(p_different: float, p_equivalent: float, margin: float, *, alpha: float = ALPHA) -> str:
    """ "different" where the two-sided test's p < alpha, "equivalent within ±margin" where the
    TOST p < alpha, "different, but within ±margin" where both (a real difference smaller than
    the margin), else "inconclusive (neither)": the data neither show a difference nor rule
    out one as large as the margin. NaN counts as not below alpha. Pass the page's corrected
    p-values (`multiplicity.correct_p_values`, the TOST p-values among them) to have the
    verdicts agree with its correction.

    Raises:
        ValueError: a margin that is not positive and finite.
    """
    _check_margin(margin)
    different, equivalent = p_different < alpha, p_equivalent < alpha
    within = f"within ±{margin:g}"
    if different:
        return f"different, but {within}" if equivalent else "different"
    return f"equivalent {within}" if equivalent else INCONCLUSIVE


def equivalence_verdict(difference: Difference, margin: float, *, alpha: float = ALPHA) -> str:
    """`verdict` of the Difference's own p-value and its `tost` against ±margin, uncorrected."""
    return verdict(difference.p_value, tost(difference, margin), margin, alpha=alpha)


def samples_verdict(
    values: Sequence[float],
    baseline: Sequence[float],
    margin: float,
    *,
    pair: bool,
    alpha: float = ALPHA,
) -> str:
    """`verdict` for values against baseline: the paired t-test where `pair` (values[i] and
    baseline[i] share a seed) else Welch's, and `stats.equivalence`'s TOST, uncorrected.

    Raises:
        ValueError: fewer than two values a side, unpaired lengths where `pair`, or a margin
            that is not positive and finite.
    """
    _check_margin(margin)
    if min(len(values), len(baseline)) < MIN_RUNS:
        raise ValueError(f"a test needs {MIN_RUNS} values a side: got {len(values)} and "
                         f"{len(baseline)}")  # fmt: skip
    if pair and len(values) != len(baseline):
        raise ValueError(f"paired values come in pairs: {len(values)} against {len(baseline)}")
    difference = paired(values, baseline) if pair else welch(values, baseline)
    assert difference is not None, "two values a side make a test"
    p_equivalent = equivalence(values, baseline, margin, pair=pair)
    return verdict(difference.p_value, p_equivalent, margin, alpha=alpha)


def _check_margin(margin: float) -> None:
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin={margin}: give the equivalence margin, positive, in the "
                         "metric's units, fixed before the runs are seen")  # fmt: skip
