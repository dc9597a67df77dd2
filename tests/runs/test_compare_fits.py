"""Power laws with an irreducible term (xfmr.runs.compare.laws) and fits to per-setting means
with the lack-of-fit test (xfmr.runs.compare.replicates): checked against scipy's curve_fit,
statsmodels' OLS, WLS and anova_lm, a lack-of-fit example worked by hand, and the coverage of
their intervals on synthetic losses with a known E and exponent."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats
from scipy.optimize import curve_fit
from statsmodels.stats.anova import anova_lm

from xfmr.runs.compare.laws import fit_power_law
from xfmr.runs.compare.replicates import (
    Refused,
    exponent_interval,
    lack_of_fit,
    means_exponent_difference,
    power_law_on_means,
)
from xfmr.runs.compare.scaling import power_law

E, A, B = 1.5, 40.0, 0.2  # L = E + A * C^(-B)
SIZES = np.geomspace(1e10, 1e14, 6)
COMPUTE = np.repeat(SIZES, 2)  # six sizes, two seeds each


def law(compute: np.ndarray, floor: float = E) -> np.ndarray:
    return floor + A * compute ** (-B)


def noisy(rng: np.random.Generator, space: str, noise: float = 0.01) -> np.ndarray:
    """The law off by a relative error (space "log") or an absolute one ("loss"), the errors
    the fit in that space assumes."""
    if space == "log":
        return law(COMPUTE) * np.exp(rng.normal(0.0, noise, COMPUTE.size))
    return law(COMPUTE) + rng.normal(0.0, noise, COMPUTE.size)


def curve_fit_reference(loss: np.ndarray, space: str, sigma: np.ndarray | None = None,
                        compute: np.ndarray = COMPUTE) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """scipy's curve_fit of the same model in (E, log A, b), and its parameters' stderrs."""

    def model(c: np.ndarray, floor: float, log_scale: float, b: float) -> np.ndarray:
        fitted = floor + np.exp(log_scale - b * np.log(c))
        return np.log(fitted) if space == "log" else fitted

    target = np.log(loss) if space == "log" else loss
    found, covariance = curve_fit(
        model, compute, target, p0=[E * 0.9, math.log(A) * 1.1, B * 0.9], sigma=sigma,
        bounds=([0.0, -np.inf, -np.inf], np.inf), ftol=1e-15, xtol=1e-15, gtol=1e-15,
        max_nfev=100_000,
    )  # fmt: skip
    return found, np.sqrt(np.diag(covariance))


# --- laws.fit_power_law ---------------------------------------------------------------------


@pytest.mark.parametrize("space", ["log", "loss"])
def test_an_exact_law_with_a_floor_is_found(space: str) -> None:
    fit = fit_power_law(COMPUTE.tolist(), law(COMPUTE).tolist(), irreducible=True, space=space)
    assert (fit.floor.value, fit.scale.value, fit.exponent.value) == pytest.approx((E, A, B))
    assert fit.exponent.high - fit.exponent.low == pytest.approx(0.0, abs=1e-6)
    assert fit.parameters == 3 and fit.df == 9 and fit.note is None
    assert fit.loss(3e12) == pytest.approx(law(np.array(3e12)), rel=1e-9)


@pytest.mark.parametrize("space", ["log", "loss"])
def test_the_fit_and_its_intervals_are_curve_fits(space: str) -> None:
    loss = noisy(np.random.default_rng(0), space)
    fit = fit_power_law(COMPUTE.tolist(), loss.tolist(), irreducible=True, space=space)
    found, stderrs = curve_fit_reference(loss, space)
    log_scale_stderr = fit.scale.stderr / fit.scale.value
    assert (fit.floor.value, math.log(fit.scale.value), fit.exponent.value) == pytest.approx(
        found, rel=1e-6
    )
    assert (fit.floor.stderr, log_scale_stderr, fit.exponent.stderr) == pytest.approx(
        stderrs, rel=1e-5
    )
    t = stats.t.ppf(0.975, COMPUTE.size - 3)
    b, se = fit.exponent.value, fit.exponent.stderr
    assert (fit.exponent.low, fit.exponent.high) == pytest.approx((b - t * se, b + t * se))
    assert fit.scale.low == pytest.approx(
        math.exp(math.log(fit.scale.value) - t * log_scale_stderr)
    )
    assert fit.floor.low == pytest.approx(max(0.0, fit.floor.value - t * fit.floor.stderr))


def test_with_the_floor_fixed_at_zero_the_log_fit_is_the_log_log_line() -> None:
    loss = noisy(np.random.default_rng(1), "log")
    fit = fit_power_law(COMPUTE.tolist(), loss.tolist(), irreducible=False, space="log")
    line = power_law(COMPUTE.tolist(), loss.tolist())
    assert fit.floor.value == 0 and fit.df == line.df == COMPUTE.size - 2
    assert (fit.exponent.value, fit.exponent.low, fit.exponent.high, fit.exponent.stderr) == (
        pytest.approx((line.b, line.b_low, line.b_high, line.b_stderr), rel=1e-9)
    )
    assert (fit.scale.value, fit.scale.low, fit.scale.high) == pytest.approx(
        (line.a, line.a_low, line.a_high), rel=1e-9
    )
    in_loss = fit_power_law(COMPUTE.tolist(), loss.tolist(), irreducible=False, space="loss")
    assert in_loss.exponent.value != pytest.approx(line.b, rel=1e-6), "other residuals"


@pytest.mark.parametrize("space", ["log", "loss"])
def test_the_intervals_hold_the_true_parameters_about_95_times_in_100(space: str) -> None:
    rng = np.random.default_rng(2)
    fits = [fit_power_law(COMPUTE.tolist(), noisy(rng, space).tolist(), irreducible=True,
                          space=space) for _ in range(300)]  # fmt: skip
    for name, truth in (("floor", E), ("scale", A), ("exponent", B)):
        covered = np.mean([getattr(f, name).low <= truth <= getattr(f, name).high for f in fits])
        assert 0.92 <= covered <= 0.98, (name, covered)


def test_a_floor_pushed_below_zero_is_fixed_at_zero_and_says_so() -> None:
    """Losses that fall faster at large compute than a line in log-log want E < 0."""
    x = np.log(COMPUTE) - np.log(COMPUTE).mean()
    loss = np.exp(1.0 - 0.05 * x - 0.01 * x**2)
    fit = fit_power_law(COMPUTE.tolist(), loss.tolist(), irreducible=True)
    pure = fit_power_law(COMPUTE.tolist(), loss.tolist(), irreducible=False)
    assert not fit.irreducible and fit.floor.value == 0 and "bound 0" in (fit.note or "")
    assert fit.exponent == pure.exponent and fit.df == COMPUTE.size - 2


@pytest.mark.parametrize(
    ("compute", "loss", "irreducible", "says"),
    [
        ([1e10, 1e11, 1e12] * 2, [3.0, 2.5, 2.2] * 2, True, "at least 4 distinct compute values"),
        ([1e10, 1e11] * 3, [3.0, 2.5] * 3, False, "at least 3 distinct compute values, got 2"),
        ([1e10, 1e11, 1e12, 1e13], [3.0, 2.5, 2.2], True, "4 values of compute, 3 of loss"),
        ([1e10, 1e11, 1e12, 1e13], [3.0, 2.5, 0.0, 2.0], True, "loss must be positive"),
        ([1e10, 1e11, math.inf, 1e13], [3.0, 2.5, 2.2, 2.0], False, "compute must be positive"),
    ],
)
def test_what_no_law_can_be_fitted_to_is_refused(
    compute: list[float], loss: list[float], irreducible: bool, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        fit_power_law(compute, loss, irreducible=irreducible)


def test_an_unknown_space_or_level_is_refused() -> None:
    points = (SIZES.tolist(), law(SIZES).tolist())
    with pytest.raises(ValueError, match="space='linear'"):
        fit_power_law(*points, irreducible=True, space="linear")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence=95"):
        fit_power_law(*points, irreducible=True, confidence=95)


# --- replicates: fits to the means, the lack-of-fit test ------------------------------------


def dummies(x: np.ndarray) -> np.ndarray:
    """One indicator column per distinct value: the model with a free mean per setting."""
    return (x[:, None] == np.unique(x)[None, :]).astype(float)


def test_the_means_fit_is_the_all_runs_fit_with_the_wls_intervals_of_the_means() -> None:
    """Unequal runs per setting (one seed of the second size lost): the fit weighted by the
    counts has the estimates of the fit to every run, and the intervals of statsmodels' WLS of
    the mean log losses, on settings - 2 df."""
    rng = np.random.default_rng(3)
    compute = np.delete(COMPUTE, 3)
    loss = np.delete(noisy(rng, "log", noise=0.03), 3)
    fit = power_law_on_means(compute.tolist(), loss.tolist(), irreducible=False)
    every = power_law(compute.tolist(), loss.tolist())
    assert fit.law.exponent.value == pytest.approx(every.b, rel=1e-9)
    assert fit.law.scale.value == pytest.approx(every.a, rel=1e-9)
    assert fit.law.df == 4 and fit.runs == (2, 1, 2, 2, 2, 2) and fit.compute == tuple(SIZES)

    x, y = np.log(compute), np.log(loss)
    means = np.array([y[x == v].mean() for v in np.unique(x)])
    assert fit.means == pytest.approx(np.exp(means).tolist(), rel=1e-12)
    wls = sm.WLS(means, sm.add_constant(np.unique(x)), weights=fit.runs).fit()
    low, high = wls.conf_int(0.05)[1]
    exponent = fit.law.exponent
    assert (exponent.low, exponent.high) == pytest.approx((-high, -low), rel=1e-9)
    assert exponent.stderr == pytest.approx(wls.bse[1], rel=1e-9)


def test_the_lack_of_fit_test_is_statsmodels_anova_of_the_line_against_a_mean_per_setting() -> None:
    rng = np.random.default_rng(4)
    compute = np.delete(COMPUTE, [3, 8])
    setting_luck = np.repeat(rng.normal(0.0, 0.03, SIZES.size), 2)
    loss = np.delete(noisy(rng, "log") * np.exp(setting_luck), [3, 8])
    test = power_law_on_means(compute.tolist(), loss.tolist(), irreducible=False).lack_of_fit
    x, y = np.log(compute), np.log(loss)
    line = sm.OLS(y, sm.add_constant(x)).fit()
    each = sm.OLS(y, dummies(x)).fit()
    table = anova_lm(line, each)
    assert test is not None and (test.lack_df, test.pure_df) == (4, 4)
    assert test.statistic == pytest.approx(table["F"][1], rel=1e-9)
    assert test.p_value == pytest.approx(table["Pr(>F)"][1], rel=1e-9)
    f_value, p_value, df_diff = each.compare_f_test(line)
    assert (test.statistic, test.p_value, test.lack_df) == pytest.approx(
        (f_value, p_value, df_diff)
    )
    assert test.pure_ss == pytest.approx(each.ssr) and test.lack_ss == pytest.approx(
        line.ssr - each.ssr
    )


# Three sizes, two seeds each, log C = 0, 1, 2: the mean log losses 2, 0.5, 0, the middle size
# below the line. Worked by hand: the line through the means is 11/6 - x, its residuals 1/6,
# -1/3, 1/6, so lack = 2 * (1/36 + 1/9 + 1/36) = 1/3 on 3 - 2 = 1 df; each seed is ±0.1 from
# its mean, so pure = 6 * 0.01 = 0.06 on 6 - 3 = 3 df; F = (1/3) / (0.06 / 3) = 50/3.
BENT = ([1.0, 1.0, math.e, math.e, math.e**2, math.e**2],
        [math.exp(v) for v in (2.1, 1.9, 0.6, 0.4, 0.1, -0.1)])  # fmt: skip


def test_a_middle_size_below_the_line_fails_the_lack_of_fit_test_and_gets_no_exponent() -> None:
    fit = power_law_on_means(*BENT, irreducible=False)
    test = fit.lack_of_fit
    assert test is not None and (test.lack_df, test.pure_df) == (1, 3)
    assert (test.lack_ss, test.pure_ss, test.statistic) == pytest.approx((1 / 3, 0.06, 50 / 3))
    assert test.p_value == pytest.approx(stats.f.sf(50 / 3, 1, 3)) and test.p_value < 0.05
    assert fit.law.exponent.value == pytest.approx(1.0)
    refused = exponent_interval(fit)
    assert isinstance(refused, Refused)
    assert str(refused) == ("the power law does not fit: lack-of-fit F = 16.7 (1, 3 df), "
                            "p = 0.027; no exponent is reported")  # fmt: skip
    assert exponent_interval(fit, alpha=0.01) is fit.law.exponent  # p = 0.027 passes at 0.01


def test_the_floor_on_means_is_curve_fit_on_every_run_and_its_test_is_worked_from_it() -> None:
    """E + A C^-b with residuals in L: the count-weighted fit to the means has curve_fit's
    estimates on every run, and the lack-of-fit sums are worked from curve_fit's curve."""
    rng = np.random.default_rng(5)
    compute = np.repeat(SIZES, 3)
    loss = law(compute) + np.repeat(rng.normal(0, 0.02, SIZES.size), 3) + rng.normal(0, 0.01, 18)
    fit = power_law_on_means(compute.tolist(), loss.tolist(), irreducible=True, space="loss")
    found, _ = curve_fit_reference(loss, "loss", compute=compute)
    law_found = (fit.law.floor.value, math.log(fit.law.scale.value), fit.law.exponent.value)
    assert law_found == pytest.approx(found, rel=1e-6) and fit.law.df == 3

    fitted = found[0] + np.exp(found[1] - found[2] * np.log(SIZES))
    groups = loss.reshape(SIZES.size, 3)
    lack = 3 * np.sum((groups.mean(axis=1) - fitted) ** 2)
    pure = np.sum((groups - groups.mean(axis=1, keepdims=True)) ** 2)
    test = fit.lack_of_fit
    assert test is not None and (test.lack_df, test.pure_df) == (3, 12)
    assert test.statistic == pytest.approx((lack / 3) / (pure / 12), rel=1e-6)
    # The means fit's s² is the lack-of-fit mean square: its stderrs are curve_fit's on the
    # means with sigma 1 / sqrt(runs), the error scale estimated from them.
    _, stderrs = curve_fit_reference(np.array(fit.means), "loss", sigma=np.full(6, 3**-0.5),
                                     compute=SIZES)  # fmt: skip
    assert fit.law.exponent.stderr == pytest.approx(stderrs[2], rel=1e-5)


def test_the_means_intervals_hold_when_each_size_has_its_own_luck_and_every_run_ones_do_not() -> (
    None
):
    """Each size's seeds share an offset (the size's luck): the means fit's interval covers
    b about 95 times in 100, the fit counting every seed as a point far less often."""
    rng = np.random.default_rng(6)
    sizes = np.geomspace(1e10, 1e13, 5)
    compute = np.repeat(sizes, 3)
    means_covered = every_covered = 0
    runs = 600
    for _ in range(runs):
        luck = np.repeat(rng.normal(0, 0.02, sizes.size), 3) + rng.normal(0, 0.02, compute.size)
        loss = (A * compute ** (-B) * np.exp(luck)).tolist()
        exponent = power_law_on_means(compute.tolist(), loss, irreducible=False).law.exponent
        every = power_law(compute.tolist(), loss)
        means_covered += exponent.low <= B <= exponent.high
        every_covered += every.b_low <= B <= every.b_high
    assert 0.93 <= means_covered / runs <= 0.97, means_covered / runs
    assert every_covered / runs < 0.88, every_covered / runs


def test_without_replicates_there_is_no_test_and_the_interval_is_the_means_ols() -> None:
    loss = law(SIZES, floor=0.0) * np.exp(np.random.default_rng(7).normal(0, 0.02, SIZES.size))
    fit = power_law_on_means(SIZES.tolist(), loss.tolist(), irreducible=False)
    ols = sm.OLS(np.log(loss), sm.add_constant(np.log(SIZES))).fit()
    low, high = ols.conf_int(0.05)[1]
    assert fit.lack_of_fit is None and fit.runs == (1,) * 6
    assert exponent_interval(fit) == fit.law.exponent
    assert (fit.law.exponent.low, fit.law.exponent.high) == pytest.approx((-high, -low))


def test_the_difference_of_exponents_of_two_means_fits() -> None:
    """By hand: b1 - b2, se = sqrt(se1² + se2²), Welch-Satterthwaite df from settings - 2 a
    fit; and refused, naming which, where one law fails its lack-of-fit test."""
    rng = np.random.default_rng(8)
    first, second = (
        power_law_on_means(COMPUTE.tolist(), noisy(rng, "log", noise=0.02).tolist(),
                           irreducible=False) for _ in range(2)
    )  # fmt: skip
    found = means_exponent_difference(first, second)
    assert not isinstance(found, Refused)
    (b1, s1), (b2, s2) = ((f.law.exponent.value, f.law.exponent.stderr) for f in (first, second))
    se = math.hypot(s1, s2)
    df = se**4 / (s1**4 / 4 + s2**4 / 4)
    t = stats.t.ppf(0.975, df)
    assert (found.delta, found.stderr, found.df) == pytest.approx((b1 - b2, se, df))
    assert (found.low, found.high) == pytest.approx((b1 - b2 - t * se, b1 - b2 + t * se))
    assert found.p_value == pytest.approx(2 * stats.t.sf(abs(b1 - b2) / se, df))

    bent = power_law_on_means(*BENT, irreducible=False)
    refused = means_exponent_difference(first, bent)
    assert isinstance(refused, Refused) and str(refused).startswith(
        "the second setting's power law does not fit: lack-of-fit F = 16.7"
    )


def test_lack_of_fit_edge_cases() -> None:
    assert lack_of_fit([[1.0, 1.0], [2.0, 2.0], [3.0]], [1.0, 2.5, 3.0], 2).p_value == 0.0
    exact = lack_of_fit([[1.0, 1.0], [2.0, 2.0], [3.0]], [1.0, 2.0, 3.0], 2)
    assert math.isnan(exact.statistic) and math.isnan(exact.p_value)
    with pytest.raises(ValueError, match="needs a setting with two runs"):
        lack_of_fit([[1.0], [2.0], [3.0]], [1.0, 2.0, 3.0], 2)
    with pytest.raises(ValueError, match="more settings than the 2 parameters"):
        lack_of_fit([[1.0, 1.1], [2.0]], [1.0, 2.0], 2)
    with pytest.raises(ValueError, match="one fitted value per setting"):
        lack_of_fit([[1.0, 1.1], [2.0], []], [1.0, 2.0, 3.0], 2)
    with pytest.raises(ValueError, match="at least 4 distinct compute values, got 3"):
        power_law_on_means(*BENT, irreducible=True)
    with pytest.raises(ValueError, match="6 values of compute against 5"):
        power_law_on_means(BENT[0], BENT[1][:5], irreducible=False)
