"""Power laws of loss against compute (xfmr.runs.compare.scaling), checked against numpy's
least squares and scipy's regression on synthetic losses with a known exponent."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from xfmr.runs.compare.scaling import exponent_difference, power_law

A, B = 40.0, 0.07  # L = A * C^(-B), near what small char models show
COMPUTE = np.repeat(np.geomspace(1e12, 3e13, 4), 3)  # four sizes, three seeds each


def losses(rng: np.random.Generator, b: float = B, noise: float = 0.01) -> np.ndarray:
    """A * C^(-b), each value off by a relative noise."""
    return A * COMPUTE ** (-b) * np.exp(rng.normal(0.0, noise, COMPUTE.size))


def test_an_exact_power_law_is_found_with_no_spread() -> None:
    fit = power_law(COMPUTE.tolist(), (A * COMPUTE ** (-B)).tolist())
    assert fit.a == pytest.approx(A, rel=1e-9) and fit.b == pytest.approx(B, rel=1e-9)
    assert fit.b_low == pytest.approx(B, rel=1e-6) and fit.b_high == pytest.approx(B, rel=1e-6)
    assert fit.n == 12 and fit.df == 10 and fit.r_squared == pytest.approx(1.0)
    assert fit.loss(1e13) == pytest.approx(A * 1e13 ** (-B), rel=1e-9)


def test_the_fit_and_its_intervals_are_numpys_and_scipys() -> None:
    loss = losses(np.random.default_rng(0))
    fit = power_law(COMPUTE.tolist(), loss.tolist())
    slope, intercept = np.polyfit(np.log(COMPUTE), np.log(loss), 1)
    assert fit.b == pytest.approx(-slope, rel=1e-9)
    assert fit.a == pytest.approx(math.exp(intercept), rel=1e-9)
    line = stats.linregress(np.log(COMPUTE), np.log(loss))
    t = stats.t.ppf(0.975, COMPUTE.size - 2)
    assert (fit.b_low, fit.b_high) == pytest.approx(
        (-line.slope - t * line.stderr, -line.slope + t * line.stderr), rel=1e-9
    )
    assert (fit.a_low, fit.a_high) == pytest.approx(
        (math.exp(line.intercept - t * line.intercept_stderr),
         math.exp(line.intercept + t * line.intercept_stderr)), rel=1e-9,
    )  # fmt: skip
    assert fit.b_low < B < fit.b_high and fit.b_stderr == pytest.approx(line.stderr)


def test_the_exponents_interval_holds_the_true_one_about_95_times_in_100() -> None:
    rng = np.random.default_rng(1)
    fits = [power_law(COMPUTE.tolist(), losses(rng, noise=0.03).tolist()) for _ in range(800)]
    covered = sum(f.b_low <= B <= f.b_high for f in fits) / len(fits)
    assert 0.93 <= covered <= 0.97, covered


def test_the_difference_of_exponents_is_the_interaction_of_one_regression() -> None:
    """Two laws whose log losses differ by an exact line have the same residuals, so the
    Welch-Satterthwaite df is the pooled 2n - 4 and the difference is the interaction term of
    one regression of log L on [1, second, log C, second * log C], solved by numpy."""
    rng = np.random.default_rng(2)
    first = losses(rng, noise=0.02)
    second = first * COMPUTE ** (-0.02) * 3.0  # b larger by 0.02, a three times
    fit, other = (power_law(COMPUTE.tolist(), v.tolist()) for v in (second, first))
    found = exponent_difference(fit, other)

    x = np.log(np.concatenate([COMPUTE, COMPUTE]))
    group = np.repeat([0.0, 1.0], COMPUTE.size)
    design = np.column_stack([np.ones_like(x), group, x, group * x])
    y = np.log(np.concatenate([first, second]))
    coefficients, residuals, *_ = np.linalg.lstsq(design, y, rcond=None)
    df = y.size - design.shape[1]
    covariance = residuals[0] / df * np.linalg.inv(design.T @ design)
    delta, stderr = -coefficients[3], math.sqrt(covariance[3, 3])
    t = stats.t.ppf(0.975, df)
    assert found.delta == pytest.approx(0.02, rel=1e-6) and found.delta == pytest.approx(delta)
    assert (found.low, found.high) == pytest.approx((delta - t * stderr, delta + t * stderr))
    assert found.p_value == pytest.approx(2 * stats.t.sf(abs(delta) / stderr, df))
    swapped = exponent_difference(other, fit)
    assert (swapped.delta, swapped.low, swapped.high) == pytest.approx(
        (-found.delta, -found.high, -found.low)
    )


def test_equal_exponents_differ_significantly_about_5_times_in_100() -> None:
    rng = np.random.default_rng(3)
    p_values = [
        exponent_difference(power_law(COMPUTE.tolist(), losses(rng, noise=0.01).tolist()),
                            power_law(COMPUTE.tolist(), losses(rng, noise=0.03).tolist())).p_value
        for _ in range(800)
    ]  # fmt: skip
    rejected = sum(p < 0.05 for p in p_values) / len(p_values)
    assert 0.03 <= rejected <= 0.07, rejected


@pytest.mark.parametrize(
    ("compute", "loss", "says"),
    [
        ([1e12, 1e13], [2.0, 1.9], "needs 3 points"),
        ([1e12, 1e13, 1e14], [2.0, 1.9], "3 values of compute against 2"),
        ([1e12, 1e13, 1e14], [2.0, 0.0, 1.8], "positive and finite"),
        ([1e12, 1e13, 1e14], [2.0, math.nan, 1.8], "positive and finite"),
        ([1e13, 1e13, 1e13], [2.0, 1.9, 1.8], "two values of compute"),
    ],
)
def test_what_no_power_law_can_be_fitted_to_is_refused(
    compute: list[float], loss: list[float], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        power_law(compute, loss)
