"""A page's corrections (xfmr.runs.compare.multiplicity) and equivalence verdicts
(xfmr.runs.compare.verdicts): Holm, Bonferroni and Benjamini-Hochberg against statsmodels'
multipletests, simultaneous intervals against the Bonferroni p-values they must agree with,
and TOST against statsmodels' ttost_ind and ttost_paired."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_ind, ttost_paired

from xfmr.runs.compare.multiplicity import (
    benjamini_hochberg,
    bonferroni,
    correct_p_values,
    simultaneous_confidence,
)
from xfmr.runs.compare.scaling import slope_difference
from xfmr.runs.compare.stats import Difference, equivalence, holm, mean_interval, paired, welch
from xfmr.runs.compare.verdicts import equivalence_verdict, samples_verdict, tost, verdict

STATSMODELS = {"holm": "holm", "bonferroni": "bonferroni", "bh": "fdr_bh"}


@pytest.mark.parametrize("method", ["holm", "bonferroni", "bh"])
def test_corrections_are_statsmodels_multipletests(method: str) -> None:
    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 17):
        p_values = rng.uniform(0, 0.2, size) ** 2
        p_values[: size // 3] = p_values[0]  # ties
        expected = multipletests(p_values, method=STATSMODELS[method])[1]
        assert correct_p_values(p_values.tolist(), method=method) == pytest.approx(expected)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx(
        multipletests([0.01, 0.04, 0.03, 0.005], method="holm")[1]
    )


def test_benjamini_hochberg_by_hand_and_with_a_test_that_did_not_run() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04: 4p/rank = 0.02, 0.02, 0.04, 0.04, a running minimum
    # from the largest down
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    for correct in (benjamini_hochberg, bonferroni):
        corrected = correct([math.nan, 0.01, 0.02])
        assert math.isnan(corrected[0])
        assert corrected[1:] == pytest.approx(
            multipletests(
                [0.01, 0.02], method="fdr_bh" if correct is benjamini_hochberg else "bonferroni"
            )[1]  # fmt: skip
        )
    assert correct_p_values([], method="bh") == []


def test_a_bad_method_or_p_value_is_refused() -> None:
    with pytest.raises(ValueError, match="method='fdr': give one of"):
        correct_p_values([0.01], method="fdr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"lie in \[0, 1\].*1.2"):
        correct_p_values([0.01, 1.2], method="holm")
    for intervals in (0, 2.0, True):
        with pytest.raises(ValueError, match="give the number of intervals"):
            simultaneous_confidence(intervals)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence=1"):
        simultaneous_confidence(3, confidence=1)


def test_simultaneous_intervals_exclude_zero_exactly_where_the_bonferroni_p_is_significant() -> (
    None
):
    rng = np.random.default_rng(1)
    samples = [(rng.normal(shift, 1, 6).tolist(), rng.normal(0, 1, 5).tolist())
               for shift in rng.uniform(-3, 3, 40)]  # fmt: skip
    level = simultaneous_confidence(len(samples))
    assert level == pytest.approx(1 - 0.05 / 40)
    differences = [welch(values, base, confidence=level) for values, base in samples]
    corrected = correct_p_values([d.p_value for d in differences], method="bonferroni")
    agree = [(d.low > 0 or d.high < 0) == (p < 0.05)
             for d, p in zip(differences, corrected, strict=True)]  # fmt: skip
    assert all(agree) and 0 < sum(p < 0.05 for p in corrected) < 40  # both kinds present
    # Holm can call significant what the simultaneous interval does not: why a page printing
    # intervals takes Bonferroni.
    assert holm([0.001, 0.04])[1] < 0.05 <= bonferroni([0.001, 0.04])[1]


def test_equal_values_have_the_mean_itself_as_their_interval() -> None:
    """Runs that agree exactly (two seeds at one ms/step) have no spread: the interval is the
    mean at both ends, where scipy's t.interval with a scale of 0 gives NaN."""
    assert mean_interval([5.0, 5.0]) == (5.0, 5.0)
    with np.errstate(invalid="ignore"):  # 0 * inf inside scipy
        assert all(math.isnan(x) for x in stats.t.interval(0.95, 1, loc=5.0, scale=0.0))


def test_the_interval_functions_take_the_level() -> None:
    values, baseline = [2.31, 2.35, 2.29, 2.4], [2.42, 2.38, 2.45, 2.41]
    level = simultaneous_confidence(3)
    assert mean_interval(values, confidence=level) == pytest.approx(
        stats.t.interval(level, 3, np.mean(values), stats.sem(values))
    )
    for difference, test in (
        (welch(values, baseline, confidence=level), stats.ttest_ind(values, baseline, equal_var=False)),
        (paired(values, baseline, confidence=level), stats.ttest_rel(values, baseline)),
    ):  # fmt: skip
        interval = test.confidence_interval(level)
        assert (difference.low, difference.high) == pytest.approx((interval.low, interval.high))
        assert difference.df == pytest.approx(test.df)
        assert difference.delta / difference.stderr == pytest.approx(test.statistic)


# --- verdicts ---------------------------------------------------------------------------------


def test_tost_of_a_welch_difference_is_statsmodels_ttost_ind_and_the_samples_tost() -> None:
    rng = np.random.default_rng(2)
    for _ in range(20):
        values, baseline = rng.normal(0.02, 0.05, 5), rng.normal(0, 0.08, 4)
        margin = float(rng.uniform(0.02, 0.2))
        found = tost(welch(values.tolist(), baseline.tolist()), margin)
        expected = ttost_ind(values, baseline, -margin, margin, usevar="unequal")[0]
        assert found == pytest.approx(expected, rel=1e-9)
        assert found == pytest.approx(equivalence(values, baseline, margin, pair=False), rel=1e-9)


def test_tost_of_a_paired_difference_is_statsmodels_ttost_paired_and_the_samples_tost() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        luck = rng.normal(0, 0.1, 5)
        values, baseline = luck + rng.normal(0.01, 0.02, 5), luck + rng.normal(0, 0.02, 5)
        margin = float(rng.uniform(0.01, 0.1))
        found = tost(paired(values.tolist(), baseline.tolist()), margin)
        expected = ttost_paired(values, baseline, -margin, margin)[0]
        assert found == pytest.approx(expected, rel=1e-9)
        assert found == pytest.approx(equivalence(values, baseline, margin, pair=True), rel=1e-9)


BASE = [2.400, 2.410, 2.395, 2.405, 2.398, 2.402]
NOISE = [0.003, -0.002, 0.001, -0.003, 0.002, -0.001]


@pytest.mark.parametrize(
    ("shift", "spread", "margin", "expected"),
    [
        (0.05, 1.0, 0.04, "different"),  # far off, beyond the margin
        (0.0, 1.0, 0.05, "equivalent within ±0.05"),  # tight about 0, well inside ±0.05
        (0.0, 20.0, 0.02, "inconclusive (neither)"),  # noisy: neither shown
        (0.01, 1.0, 0.05, "different, but within ±0.05"),  # a real difference, smaller than 0.05
    ],
)
def test_the_four_verdicts(shift: float, spread: float, margin: float, expected: str) -> None:
    values = [b + shift + spread * n for b, n in zip(BASE, NOISE, strict=True)]
    for pair in (True, False):
        found = samples_verdict(values, BASE, margin, pair=pair)
        difference = paired(values, BASE) if pair else welch(values, BASE)
        assert found == equivalence_verdict(difference, margin) == expected, pair


def test_a_verdict_takes_the_pages_corrected_p_values() -> None:
    assert verdict(0.04, 0.9, 0.1) == "different"
    assert verdict(0.04 * 3, 0.9, 0.1) == "inconclusive (neither)"  # Bonferroni over three
    assert verdict(math.nan, 0.01, 0.1) == "equivalent within ±0.1"
    assert verdict(0.04, 0.01, 0.1, alpha=0.01) == "inconclusive (neither)"


def test_an_exponent_difference_gets_a_verdict_too() -> None:
    difference = slope_difference((0.075, 0.004, 4), (0.072, 0.005, 4))
    se, df = math.hypot(0.004, 0.005), difference.df
    expected = max(stats.t.sf((0.003 + 0.02) / se, df), stats.t.cdf((0.003 - 0.02) / se, df))
    assert tost(difference, 0.02) == pytest.approx(expected)
    assert equivalence_verdict(difference, 0.02) == "equivalent within ±0.02"


def test_what_no_verdict_can_be_given_for_is_refused() -> None:
    difference = welch([1.0, 1.1], [1.2, 1.3])
    for margin in (0.0, -0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="give the equivalence margin, positive"):
            equivalence_verdict(difference, margin)
    with pytest.raises(ValueError, match="carries no standard error and df"):
        tost(Difference(0.1, 0.0, 0.2, 0.04, 1.0, 0.1), 0.2)
    with pytest.raises(ValueError, match="needs 2 values a side: got 1 and 2"):
        samples_verdict([1.0], [1.0, 1.1], 0.1, pair=False)
    with pytest.raises(ValueError, match="come in pairs: 3 against 2"):
        samples_verdict([1.0, 1.1, 1.2], [1.0, 1.1], 0.1, pair=True)
    # Every seed 0.5 apart: scipy's t is infinite (p = 0), TOST has no spread to test with.
    no_spread = Difference(0.5, 0.5, 0.5, 0.0, math.nan, 0.0, pairs=2, stderr=0.0, df=1.0)
    assert math.isnan(tost(no_spread, 0.2)) and equivalence_verdict(no_spread, 0.2) == "different"
