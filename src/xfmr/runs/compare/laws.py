"""Loss against compute with an irreducible term: L = E + A * C^(-b), E >= 0, fitted by
nonlinear least squares, with the t intervals of E, A and b.

    fit_power_law  L = E + A * C^(-b) (or with E fixed at 0) to (compute, loss) points, each
                   point its own residual
    weighted_law   the same with a weight per point: `replicates` fits the per-setting means
                   with their run counts as weights

The residuals are in log L (`space="log"`: log L - log fitted, relative errors, as the log-log
fit of `scaling.power_law`; Hoffmann et al. 2022, App. D.2, fit their E + A/N^α + B/D^β on log
losses) or in L itself (`space="loss"`: absolute errors). With E fixed at 0 and residuals in
log L the model is the line log L = log A - b log C, and the fit is `scaling.power_law`'s
exactly. The intervals are the linear approximation's (Wald) t intervals of nonlinear least
squares, s² (JᵀWJ)⁻¹ with n - parameters df (Bates & Watts 1988, ch. 2; NIST/SEMATECH
e-Handbook §4.1.4.2), which scipy.optimize.curve_fit's pcov also is. scipy loads on the first
call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from xfmr.runs.compare.stats import CONFIDENCE

Space = Literal["log", "loss"]
SPACES = ("log", "loss")
# E's starting values, as fractions of the least loss: the line through log(L - E) on log C
# gives A and b for each, and the best of them starts the search (a grid of starts, as
# Hoffmann et al. 2022 take, since E + A C^-b has flat directions a single start can stall in).
FLOOR_STARTS = (0.0, 0.5, 0.8, 0.9, 0.95, 0.99)
TOLERANCE = 1e-15  # least_squares' ftol, xtol and gtol: the fits are small; run them to the end
AT_BOUND = 1e-9  # E below this share of the least loss has reached its bound 0


@dataclass(frozen=True)
class Estimate:
    """A fitted parameter, its standard error and its t interval.

    Attributes:
        value: the estimate.
        stderr: its standard error.
        low: the lower end of its interval, at the fit's confidence.
        high: the upper end.
    """

    value: float
    stderr: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.4g} [{self.low:.4g}, {self.high:.4g}]"


@dataclass(frozen=True)
class LossLaw:
    """L = E + A * C^(-b), fitted to `points` values, with intervals at `confidence`.

    Attributes:
        floor: E, the irreducible loss, its interval cut at 0; exactly 0 with no spread where
            it was fixed.
        scale: A; its interval is log A's t interval exponentiated, its stderr the delta
            method's A * se(log A).
        exponent: b; positive when loss falls as compute grows.
        irreducible: whether E was fitted (3 parameters) or fixed at 0 (2).
        space: where the residuals are: "log" (log L - log fitted) or "loss" (L - fitted).
        points: the values fitted (for `replicates`, the per-setting means).
        residual_ss: the weighted sum of squared residuals, in `space`.
        confidence: the intervals' level.
        note: why E is fixed although it was asked for (it reached its bound 0); else None.
    """

    floor: Estimate
    scale: Estimate
    exponent: Estimate
    irreducible: bool
    space: Space
    points: int
    residual_ss: float
    confidence: float
    note: str | None = None

    @property
    def parameters(self) -> int:
        return 3 if self.irreducible else 2

    @property
    def df(self) -> int:
        """The residual degrees of freedom: points - parameters."""
        return self.points - self.parameters

    def loss(self, compute: float) -> float:
        """The fitted loss at `compute`."""
        return self.floor.value + self.scale.value * compute ** (-self.exponent.value)


def fit_power_law(
    compute: Sequence[float],
    loss: Sequence[float],
    *,
    irreducible: bool,
    space: Space = "log",
    confidence: float = CONFIDENCE,
) -> LossLaw:
    """L = E + A * C^(-b) by least squares over every point, minimising Σ r_i² with r_i =
    log L_i - log(E + A C_i^(-b)) (space "log") or L_i - (E + A C_i^(-b)) (space "loss"); E >= 0
    where `irreducible`, else E = 0. Replicates (seeds at one compute value) count as
    independent points here; `replicates.power_law_on_means` does not take them so.

    Raises:
        ValueError: as `weighted_law`.
    """
    return weighted_law(compute, loss, [1.0] * len(compute), irreducible=irreducible,
                        space=space, confidence=confidence)  # fmt: skip


def weighted_law(
    compute: Sequence[float],
    loss: Sequence[float],
    weights: Sequence[float],
    *,
    irreducible: bool,
    space: Space = "log",
    confidence: float = CONFIDENCE,
) -> LossLaw:
    """`fit_power_law` minimising Σ w_i r_i². The error variance is estimated as s² = Σ w_i
    r_i² / (n - p), so a point of weight w has variance s² / w (a mean of w runs), and the
    covariance is s² (JᵀWJ)⁻¹, J the Jacobian of the fitted values (in `space`) at the
    optimum. Where E is asked for but reaches its bound 0, the Wald interval of a parameter on
    its bound is no interval: the law is refitted with E fixed at 0 (the same optimum) and
    `note` says so.

    Raises:
        ValueError: lengths that differ, a value or weight that is not positive and finite,
            an unknown space or confidence, too few distinct compute values for the
            parameters (at least parameters + 1, so that even the per-setting means leave a
            residual), or a fit that does not converge or does not identify its parameters.
    """
    _check(compute, loss, weights, space, confidence)
    parameters = 3 if irreducible else 2
    distinct = sorted(set(compute))
    if len(distinct) <= parameters:
        formula = "E + A * C^(-b)" if irreducible else "A * C^(-b)"
        raise ValueError(
            f"{formula} has {parameters} parameters: an interval needs at least {parameters + 1} "
            f"distinct compute values, got {len(distinct)}: {distinct}"
        )
    import numpy as np

    log_compute = np.log(np.asarray(compute, dtype=float))
    centre = float(log_compute.mean())  # log C - centre keeps the Jacobian's columns apart
    points = (log_compute - centre, np.asarray(loss, float), np.asarray(weights, float))
    theta = _solve(*points, irreducible=irreducible, space=space)
    if irreducible and theta[0] <= AT_BOUND * min(loss):
        law = weighted_law(compute, loss, weights, irreducible=False, space=space,
                           confidence=confidence)  # fmt: skip
        note = "E reached its bound 0 (no irreducible loss shown): fitted with E fixed at 0"
        return replace(law, note=note)
    return _law(theta, *points, centre=centre, space=space, confidence=confidence)


def _check(
    compute: Sequence[float],
    loss: Sequence[float],
    weights: Sequence[float],
    space: str,
    confidence: float,
) -> None:
    if not len(compute) == len(loss) == len(weights):
        raise ValueError(f"{len(compute)} values of compute, {len(loss)} of loss and "
                         f"{len(weights)} weights: give one of each per point")  # fmt: skip
    for name, values in (("compute", compute), ("loss", loss), ("weights", weights)):
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(f"{name} must be positive and finite: {list(values)}")
    if space not in SPACES:
        raise ValueError(f"space={space!r}: the residuals are in one of {SPACES}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence}: give a level between 0 and 1, e.g. 0.95")


def _model(theta: Any, x: Any, *, space: Space) -> tuple[Any, Any]:
    """The fitted values in `space` at centred log compute `x`, and their Jacobian in theta =
    ([E,] α, b), where A C^(-b) = exp(α - b x)."""
    import numpy as np

    *floor, alpha, b = theta
    power = np.exp(alpha - b * x)
    fitted = (floor[0] if floor else 0.0) + power
    columns = [np.ones_like(x)] * len(floor) + [power, -x * power]
    jacobian = np.column_stack(columns)
    if space == "log":
        return np.log(fitted), jacobian / fitted[:, None]
    return fitted, jacobian


def _solve(x: Any, loss: Any, weights: Any, *, irreducible: bool, space: Space) -> Any:
    """The least-squares theta, from the best of the starts."""
    import numpy as np
    from scipy.optimize import least_squares

    target = np.log(loss) if space == "log" else loss
    root = np.sqrt(weights)

    def residuals(theta: Any) -> Any:
        return root * (_model(theta, x, space=space)[0] - target)

    def jacobian(theta: Any) -> Any:
        return root[:, None] * _model(theta, x, space=space)[1]

    starts = []
    for share in FLOOR_STARTS if irreducible else (0.0,):
        floor = share * float(loss.min())
        slope, alpha = np.polyfit(x, np.log(loss - floor), 1, w=root)
        starts.append([floor, alpha, -slope] if irreducible else [alpha, -slope])
    start = min(starts, key=lambda theta: float(np.sum(residuals(np.array(theta)) ** 2)))
    lower = [0.0, -np.inf, -np.inf] if irreducible else [-np.inf, -np.inf]
    found = least_squares(residuals, start, jac=jacobian, bounds=(lower, np.inf), method="trf",
                          x_scale="jac", ftol=TOLERANCE, xtol=TOLERANCE, gtol=TOLERANCE,
                          max_nfev=10_000)  # fmt: skip
    if found.status <= 0:
        raise ValueError(f"the fit of the power law did not converge: {found.message}")
    return found.x


def _law(
    theta: Any,
    x: Any,
    loss: Any,
    weights: Any,
    *,
    centre: float,
    space: Space,
    confidence: float,
) -> LossLaw:
    """Estimates and intervals of (E, log A, b) from the fit's theta = ([E,] α, b), log A =
    α + b * centre."""
    import numpy as np
    from scipy import stats

    fitted, jacobian = _model(theta, x, space=space)
    target = np.log(loss) if space == "log" else loss
    residual_ss = float(np.sum(weights * (target - fitted) ** 2))
    df = len(x) - len(theta)
    weighted = np.sqrt(weights)[:, None] * jacobian
    try:
        covariance = residual_ss / df * np.linalg.inv(weighted.T @ weighted)
    except np.linalg.LinAlgError as error:
        raise ValueError("these points do not identify E, A and b (a singular fit)") from error
    to_log_scale = np.eye(len(theta))
    to_log_scale[-2, -1] = centre  # d(log A)/d(b) = centre
    covariance = to_log_scale @ covariance @ to_log_scale.T
    values = to_log_scale @ theta
    stderrs = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    t = float(stats.t.ppf((1 + confidence) / 2, df))
    *floor, log_scale, exponent = (
        Estimate(float(v), float(s), float(v - t * s), float(v + t * s))
        for v, s in zip(values, stderrs, strict=True)
    )
    if floor:  # E >= 0 is known: the interval is cut at the bound
        floor = [replace(floor[0], low=max(0.0, floor[0].low))]
    scale = math.exp(log_scale.value)
    return LossLaw(
        floor=floor[0] if floor else Estimate(0.0, 0.0, 0.0, 0.0),
        scale=Estimate(
            scale, scale * log_scale.stderr, math.exp(log_scale.low), math.exp(log_scale.high)
        ),  # fmt: skip
        exponent=exponent,
        irreducible=bool(floor),
        space=space,
        points=len(x),
        residual_ss=residual_ss,
        confidence=confidence,
    )
