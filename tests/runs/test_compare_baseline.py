"""Each setting against the baseline, in-process on synthetic numbers: the paired t-test where
the seeds pair (else Welch's), the effect sizes, TOST equivalence and the seeds that would
detect a difference, each checked against the formula worked by hand with scipy.stats.t, and
against statsmodels (a dev dependency, not one of xfmr's)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from xfmr.runs.compare.baseline import (
    EFFECT,
    TOST_HOLM,
    Questions,
    against_baseline,
    paired_samples,
    seeds_column,
    tost_column,
    verdict_column,
)
from xfmr.runs.compare.stats import equivalence, holm, paired, power, seeds_needed, welch

# Five seeds of a baseline and of a setting whose runs move with the seed's own luck (the
# per-seed offset is far larger than the setting's effect: only pairing sees it).
SEED_LUCK = [0.031, -0.044, 0.012, 0.058, -0.027]
BASELINE = [2.400 + luck for luck in SEED_LUCK]
BETTER = [
    2.390 + luck + noise
    for luck, noise in zip(SEED_LUCK, [1e-3, -2e-3, 0, 2e-3, -1e-3], strict=True)
]
WIDER = [2.38, 2.45, 2.31, 2.42]


def by_hand_paired(values: list[float], baseline: list[float]) -> dict[str, float]:
    """Student's t on the differences (n - 1 df), from its definition."""
    differences = np.subtract(values, baseline)
    n, mean, sd = len(differences), differences.mean(), differences.std(ddof=1)
    se = sd / math.sqrt(n)
    t = mean / se
    half = stats.t.ppf(0.975, n - 1) * se
    return {
        "delta": mean,
        "p": 2 * stats.t.sf(abs(t), n - 1),
        "low": mean - half,
        "high": mean + half,
        "d_z": mean / sd,
        "se": se,
        "df": n - 1,
    }


def by_hand_welch(values: list[float], baseline: list[float]) -> dict[str, float]:
    """Welch 1947 with the Welch-Satterthwaite df, and Cohen's d over the pooled sd."""
    n1, n2 = len(values), len(baseline)
    v1, v2 = np.var(values, ddof=1) / n1, np.var(baseline, ddof=1) / n2
    se = math.sqrt(v1 + v2)
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
    delta = np.mean(values) - np.mean(baseline)
    pooled = math.sqrt(
        ((n1 - 1) * np.var(values, ddof=1) + (n2 - 1) * np.var(baseline, ddof=1)) / (n1 + n2 - 2)
    )
    half = stats.t.ppf(0.975, df) * se
    return {
        "delta": delta,
        "p": 2 * stats.t.sf(abs(delta / se), df),
        "low": delta - half,
        "high": delta + half,
        "d": delta / pooled,
        "se": se,
        "df": df,
        "pooled": pooled,
    }


def by_hand_tost(delta: float, se: float, df: float, margin: float) -> float:
    """Schuirmann 1987: H0 delta <= -margin and H0 delta >= margin, each one-sided."""
    lower = stats.t.sf((delta + margin) / se, df)
    upper = stats.t.cdf((delta - margin) / se, df)
    return max(lower, upper)


def test_paired_difference_interval_p_and_d_z_equal_the_hand_computation() -> None:
    found, expected = paired(BETTER, BASELINE), by_hand_paired(BETTER, BASELINE)
    assert found.test == "paired (n=5)" and found.pairs == 5
    assert found.delta == pytest.approx(expected["delta"], rel=1e-12)
    assert (found.low, found.high) == pytest.approx((expected["low"], expected["high"]), rel=1e-12)
    assert found.p_value == pytest.approx(expected["p"], rel=1e-10)
    assert found.p_value == pytest.approx(stats.ttest_rel(BETTER, BASELINE).pvalue, rel=1e-12)
    assert found.effect_size == pytest.approx(expected["d_z"], rel=1e-12)
    # The seed's luck swamps Welch's test; the differences cancel it.
    assert found.p_value < 0.001 < 0.5 < welch(BETTER, BASELINE).p_value


def test_welch_difference_interval_p_and_cohens_d_equal_the_hand_computation() -> None:
    found, expected = welch(WIDER, BASELINE), by_hand_welch(WIDER, BASELINE)
    assert found.test == "Welch" and found.pairs is None
    assert found.delta == pytest.approx(expected["delta"], rel=1e-12)
    assert (found.low, found.high) == pytest.approx((expected["low"], expected["high"]), rel=1e-10)
    assert found.p_value == pytest.approx(expected["p"], rel=1e-10)
    assert found.effect_size == pytest.approx(expected["d"], rel=1e-12)
    assert found.spread == pytest.approx(expected["pooled"], rel=1e-12)


@pytest.mark.parametrize("margin", [0.005, 0.02, 0.1])
def test_tost_equals_the_hand_computation_paired_and_welch(margin: float) -> None:
    hand = by_hand_paired(BETTER, BASELINE)
    assert equivalence(BETTER, BASELINE, margin, pair=True) == pytest.approx(
        by_hand_tost(hand["delta"], hand["se"], hand["df"], margin), rel=1e-9
    )
    hand = by_hand_welch(WIDER, BASELINE)
    assert equivalence(WIDER, BASELINE, margin, pair=False) == pytest.approx(
        by_hand_tost(hand["delta"], hand["se"], hand["df"], margin), rel=1e-9
    )


def test_tost_equals_statsmodels() -> None:
    weightstats = pytest.importorskip("statsmodels.stats.weightstats")
    for margin in (0.005, 0.02, 0.1):
        p_paired, *_ = weightstats.ttost_paired(
            np.array(BETTER), np.array(BASELINE), -margin, margin
        )
        assert equivalence(BETTER, BASELINE, margin, pair=True) == pytest.approx(p_paired, rel=1e-9)
        p_welch, *_ = weightstats.ttost_ind(
            np.array(WIDER), np.array(BASELINE), -margin, margin, usevar="unequal"
        )
        assert equivalence(WIDER, BASELINE, margin, pair=False) == pytest.approx(p_welch, rel=1e-9)


@pytest.mark.parametrize(
    ("difference", "spread", "pair", "expected"),
    [
        # Cohen 1988, table 2.4.1 / G*Power: d = 1, alpha 0.05 two-sided, power 0.8 -> 17 a
        # group (the normal approximation says 16); paired d_z = 0.5 -> 34 (normal: 32).
        (1.0, 1.0, False, 17),
        (0.5, 1.0, True, 34),
        (0.05, 0.1, True, 34),  # only the ratio counts, and the sign not at all
        (-0.02, 0.02, False, 17),
        (0.5, 1.0, False, 64),
    ],
)
def test_seeds_needed_equal_published_values(
    difference: float, spread: float, pair: bool, expected: int
) -> None:
    found = seeds_needed(difference, spread, pair=pair)
    assert found == expected
    effect = difference / spread
    assert power(effect, found, pair=pair) >= 0.8 > power(effect, found - 1, pair=pair)


def test_power_equals_the_noncentral_t_by_hand() -> None:
    # Two samples of 10, d = 1: df 18, noncentrality sqrt(5).
    critical = stats.t.ppf(0.975, 18)
    expected = stats.nct.sf(critical, 18, math.sqrt(5)) + stats.nct.cdf(-critical, 18, math.sqrt(5))
    assert power(1.0, 10, pair=False) == pytest.approx(expected, rel=1e-12)
    # statsmodels 0.15: TTestIndPower().power(1.0, 10, 0.05) = 0.56201
    assert power(1.0, 10, pair=False) == pytest.approx(0.56201, abs=1e-5)


def test_seeds_needed_equal_statsmodels() -> None:
    sm_power = pytest.importorskip("statsmodels.stats.power")
    for effect in (0.3, 0.8, 1.5, 3.0):
        two = sm_power.TTestIndPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
        one = sm_power.TTestPower().solve_power(effect_size=effect, alpha=0.05, power=0.8)
        assert seeds_needed(effect, 1.0, pair=False) == max(2, math.ceil(two))
        assert seeds_needed(effect, 1.0, pair=True) == max(2, math.ceil(one))


def test_no_spread_or_no_difference_plans_nothing() -> None:
    assert seeds_needed(0.1, 0.0, pair=True) is None
    assert seeds_needed(0.1, float("nan"), pair=False) is None
    assert seeds_needed(0.0, 1.0, pair=False) is None  # no n reaches 80% power for nothing


def sample(values: list[float], seeds: list[str | None] | None = None) -> list:
    seeds = seeds or [str(seed) for seed in range(1, len(values) + 1)]
    return list(zip(seeds, values, strict=True))


def test_seeds_pair_only_when_every_baseline_seed_ran_once_in_the_setting() -> None:
    baseline = sample([1.0, 2.0, 3.0])
    superset = sample([1.5, 2.5, 9.0, 3.5], ["2", "1", "7", "3"])
    assert paired_samples(superset, baseline) == ([2.5, 1.5, 3.5], [1.0, 2.0, 3.0])
    assert paired_samples(sample([1.5, 2.5]), baseline) is None  # seed 3 missing here
    assert paired_samples(sample([1.5, 2.5, 3.5], ["1", "1", "3"]), baseline) is None  # twice
    assert paired_samples(sample([1.5, 2.5, 3.5], [None, "2", "3"]), baseline) is None
    assert (
        paired_samples(sample([1.5, 2.5, 3.5]), sample([1.0, 2.0, 3.0], ["1", None, "3"])) is None
    )
    assert paired_samples(sample([1.5]), sample([1.0])) is None  # one pair tests nothing


def test_each_setting_is_tested_paired_or_welch_and_holm_corrected_together() -> None:
    samples = {
        "baseline": sample(BASELINE),
        "better": sample(BETTER),
        "unpaired": sample(WIDER, ["11", "12", "13", "14"]),
        "one run": sample([2.3]),
    }
    cells = against_baseline(samples, "baseline", Questions())
    assert cells["baseline"]["significant"] == "baseline" and cells["baseline"]["test"] is None
    assert cells["better"]["test"] == "paired (n=5)" and cells["unpaired"]["test"] == "Welch"
    assert cells["better"][EFFECT] == pytest.approx(by_hand_paired(BETTER, BASELINE)["d_z"])
    assert cells["unpaired"][EFFECT] == pytest.approx(by_hand_welch(WIDER, BASELINE)["d"])
    paired_p, welch_p = by_hand_paired(BETTER, BASELINE)["p"], by_hand_welch(WIDER, BASELINE)["p"]
    assert cells["better"]["p (t-test)"] == pytest.approx(paired_p, rel=1e-10)
    assert cells["unpaired"]["p (t-test)"] == pytest.approx(welch_p, rel=1e-10)
    # Holm over two tests: the smaller p doubled, the larger as it is but never below that.
    assert paired_p < welch_p
    assert cells["better"]["p (Holm)"] == pytest.approx(2 * paired_p, rel=1e-10)
    assert cells["unpaired"]["p (Holm)"] == pytest.approx(max(2 * paired_p, welch_p), rel=1e-10)
    assert cells["better"]["significant"] == "yes" and cells["unpaired"]["significant"] == "no"
    assert cells["one run"]["test"] is None and "no test" in cells["one run"]["note"]


def test_equivalence_verdicts_and_their_holm_correction() -> None:
    margin = 0.02
    close = [b + n for b, n in zip(BASELINE, [2e-3, -3e-3, 1e-3, -1e-3, 1e-3], strict=True)]
    samples = {
        "baseline": sample(BASELINE),
        "equivalent": sample(close),
        "different": sample(
            [b + 0.05 + n for b, n in zip(BASELINE, [1e-3, -1e-3, 0, 2e-3, 0], strict=True)]
        ),
        "unclear": sample(WIDER, ["11", "12", "13", "14"]),
    }
    cells = against_baseline(samples, "baseline", Questions(equivalence=margin))
    verdicts = {key: cells[key][verdict_column(margin)] for key in samples}
    assert verdicts == {
        "baseline": None,
        "equivalent": "equivalent within ±0.02",
        "different": "different",
        "unclear": "not shown",
    }
    raw = {
        "equivalent": by_hand_tost(**_tost_inputs(close, True), margin=margin),
        "different": None,
        "unclear": by_hand_tost(**_tost_inputs(WIDER, False), margin=margin),
    }
    raw["different"] = cells["different"][tost_column(margin)]
    assert cells["equivalent"][tost_column(margin)] == pytest.approx(raw["equivalent"], rel=1e-9)
    assert cells["unclear"][tost_column(margin)] == pytest.approx(raw["unclear"], rel=1e-9)
    expected = holm(list(raw.values()))
    assert [cells[key][TOST_HOLM] for key in raw] == pytest.approx(expected)


def _tost_inputs(values: list[float], pair: bool) -> dict[str, float]:
    hand = by_hand_paired(values, BASELINE) if pair else by_hand_welch(values, BASELINE)
    return {"delta": hand["delta"], "se": hand["se"], "df": hand["df"]}


def test_a_tiny_but_real_difference_is_both_different_and_within_the_margin() -> None:
    tiny = [b + 0.001 + n for b, n in zip(BASELINE, [1e-5, -1e-5, 2e-5, 0, -2e-5], strict=True)]
    samples = {"baseline": sample(BASELINE), "tiny": sample(tiny)}
    cells = against_baseline(samples, "baseline", Questions(equivalence=0.01))
    assert cells["tiny"][verdict_column(0.01)] == "different, but within ±0.01"


def test_detect_plans_with_the_sd_of_differences_where_paired_else_the_pooled_sd() -> None:
    samples = {
        "baseline": sample(BASELINE),
        "better": sample(BETTER),
        "unpaired": sample(WIDER, ["11", "12", "13", "14"]),
    }
    cells = against_baseline(samples, "baseline", Questions(detect=0.01))
    sd_paired = np.std(np.subtract(BETTER, BASELINE), ddof=1)
    assert cells["better"]["sd for power"] == pytest.approx(sd_paired)
    assert cells["better"][seeds_column(0.01)] == seeds_needed(0.01, sd_paired, pair=True)
    pooled = by_hand_welch(WIDER, BASELINE)["pooled"]
    assert cells["unpaired"]["sd for power"] == pytest.approx(pooled)
    assert cells["unpaired"][seeds_column(0.01)] == seeds_needed(0.01, pooled, pair=False)
    assert cells["better"][seeds_column(0.01)] < cells["unpaired"][seeds_column(0.01)]


def test_a_runs_seed_is_its_override_else_its_configs(tmp_path: Path) -> None:
    from xfmr.runs.compare.runs import find_runs

    for name, overrides, config in (
        ("a", ["pos=learned", "seed=3"], "seed: 1337\n"),
        ("b", ["pos=learned"], "seed: 1337\noptimized_metric: val/loss\n"),
        ("c", ["pos=learned"], None),
    ):
        (tmp_path / name).mkdir()
        results = {"status": "completed", "overrides": overrides}
        (tmp_path / name / "results.json").write_text(json.dumps(results))
        if config:
            (tmp_path / name / "config.yaml").write_text(config)
    assert [run.seed for run in find_runs([tmp_path])] == ["3", "1337", None]
