"""How loss falls with training compute: a power law fitted in log-log, and whether two such
laws fall at different rates.

    power_law            L = a * C^(-b) by least squares on (log C, log L), with the 95% t
                         intervals of a and b from the regression (n - 2 df)
    exponent_difference  one law's b minus another's, its 95% interval with the
                         Welch-Satterthwaite df of two independent slopes, and the p-value

Kaplan et al. 2020 ("Scaling Laws for Neural Language Models") fit L(C) = (C_c / C)^alpha_C this
way. The fit has no irreducible term: over a narrow range of compute a pure power law is what
the data can pin down; `laws.fit_power_law` adds one, and `replicates` fits the per-setting
means and tests the law's lack of fit. scipy loads on the first call, as in `stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xfmr.runs.compare.stats import CONFIDENCE, Difference

MIN_POINTS = 3  # a line through two points has no residual, and so no interval


@dataclass(frozen=True)
class PowerLaw:
    """L = a * C^(-b), fitted to `n` points, with 95% intervals.

    Attributes:
        a, b: the fit; b > 0 when loss falls as compute grows.
        a_low, a_high: the interval of a (the intercept's t interval, exponentiated).
        b_low, b_high: the interval of b (the slope's t interval, negated).
        b_stderr: the standard error of b.
        n: the points fitted; the intervals have n - 2 degrees of freedom.
        r_squared: the share of log L's variance the line explains.
    """

    a: float
    b: float
    a_low: float
    a_high: float
    b_low: float
    b_high: float
    b_stderr: float
    n: int
    r_squared: float

    @property
    def df(self) -> int:
        return self.n - 2

    def loss(self, compute: float) -> float:
        """The fitted loss at `compute`."""
        return self.a * compute ** (-self.b)


def power_law(compute: Sequence[float], loss: Sequence[float]) -> PowerLaw:
    """Least squares of log L on log C (natural logs): log L = log a - b log C, so the
    residuals are in log L. Every run is a point: seeds at one compute value count as
    independent, which `replicates.power_law_on_means` does not assume.

    Raises:
        ValueError: fewer than MIN_POINTS points, lengths that differ, a value that is not
            positive and finite, or a single value of compute.
    """
    if len(compute) != len(loss):
        raise ValueError(f"{len(compute)} values of compute against {len(loss)} of loss")
    if len(compute) < MIN_POINTS:
        raise ValueError(f"a power law with an interval needs {MIN_POINTS} points, got "
                         f"{len(compute)}")  # fmt: skip
    values = [*compute, *loss]
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"compute and loss must be positive and finite: {values}")
    if len(set(compute)) < 2:
        raise ValueError(f"a slope needs two values of compute, got only {compute[0]}")
    from scipy import stats

    line = stats.linregress([math.log(c) for c in compute], [math.log(v) for v in loss])
    t = float(stats.t.ppf((1 + CONFIDENCE) / 2, len(compute) - 2))
    slope, intercept = float(line.slope), float(line.intercept)
    return PowerLaw(
        a=math.exp(intercept),
        b=-slope,
        a_low=math.exp(intercept - t * line.intercept_stderr),
        a_high=math.exp(intercept + t * line.intercept_stderr),
        b_low=-slope - t * line.stderr,
        b_high=-slope + t * line.stderr,
        b_stderr=float(line.stderr),
        n=len(compute),
        r_squared=float(line.rvalue) ** 2,
    )


def exponent_difference(
    fit: PowerLaw, other: PowerLaw, *, confidence: float = CONFIDENCE
) -> Difference:
    """fit.b - other.b, its 95% interval (at `confidence`) and two-sided p-value: the t
    statistic of two independent slopes, with the Welch-Satterthwaite degrees of freedom (as
    `stats.welch` takes for two means). Positive: `fit`'s loss falls faster with compute.
    Each fit counts every run as a point; `replicates.means_exponent_difference` is the same
    on fits to the per-setting means."""
    return slope_difference(
        (fit.b, fit.b_stderr, fit.df), (other.b, other.b_stderr, other.df), confidence=confidence
    )


def slope_difference(
    slope: tuple[float, float, float],
    other: tuple[float, float, float],
    *,
    confidence: float = CONFIDENCE,
) -> Difference:
    """The difference of two independent estimates, each (value, standard error, df): delta =
    b1 - b2, se = sqrt(se1² + se2²), and t = delta / se on the Welch-Satterthwaite df
    (se1² + se2²)² / (se1⁴ / df1 + se2⁴ / df2) (Satterthwaite 1946), with its interval at
    `confidence` and two-sided p-value."""
    from scipy import stats

    (value, stderr, df), (other_value, other_stderr, other_df) = slope, other
    delta = value - other_value
    var, other_var = stderr**2, other_stderr**2
    combined = math.sqrt(var + other_var)
    if combined == 0:  # two exact laws: no spread to test against
        return Difference(delta, delta, delta, math.nan, effect_size=math.nan, spread=math.nan,
                          stderr=0.0)  # fmt: skip
    df = (var + other_var) ** 2 / (var**2 / df + other_var**2 / other_df)
    t = float(stats.t.ppf((1 + confidence) / 2, df))
    p_value = float(2 * stats.t.sf(abs(delta) / combined, df))
    # No effect size: the exponents' difference is already on the scale it is read on.
    return Difference(delta=delta, low=delta - t * combined, high=delta + t * combined,
                      p_value=p_value, effect_size=math.nan, spread=combined, stderr=combined,
                      df=df)  # fmt: skip
