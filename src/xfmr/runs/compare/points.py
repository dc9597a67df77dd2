"""Where in its history a comparison reads each run's metric: at the end (the final value), or
at an equal budget, `--at step=N`, `tokens=N`, `flops=N` or `time=S`, so that variants of
different speed or size compare at the same training steps, data, compute or time.

A run's history holds a row per validation (results.json's `history`): the step, `time_s`
(seconds spent training so far, validation excluded), `tokens` and `flops` (training tokens and
FLOPs so far, over all processes; runs from before they were counted lack them) and the `val/`
metrics. The value at a point is read off that history, linearly interpolated between the two
validations around it, exact at a validation; a run whose history does not reach the point has
none there, and `shortfall` says how far it got.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from xfmr.errors import UserError
from xfmr.run_dir.files import RESULTS_FILE
from xfmr.runs.compare.runs import AXES, Run

AXIS_TITLES = {
    "step": "step",
    "tokens": "training tokens",
    "flops": "training FLOPs",
    "time": "training seconds (validation excluded)",
}
EXAMPLES = "step=2000, tokens=2e8, flops=1.5e15, time=600"


@dataclass(frozen=True)
class Point:
    """A point of every run's training: `axis` (step, tokens, flops or time in seconds) at
    `value`."""

    axis: str
    value: float

    @property
    def field(self) -> str:
        """The history field that measures the axis."""
        return AXES[self.axis]

    def __str__(self) -> str:
        return f"{self.axis}={short(self.value)}"


def parse_point(spec: str) -> Point:
    """`--at KIND=N`: KIND one of AXES, N a number >= 0 (`2e8` and `1.5e15` forms too)."""
    axis, equals, text = spec.partition("=")
    axis = axis.strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not equals or axis not in AXES or not math.isfinite(value) or value < 0:
        raise UserError(
            f"--at {spec}: give KIND=N with KIND one of {', '.join(AXES)} and N a number "
            f">= 0 (time in training seconds), e.g. {EXAMPLES}"
        )
    return Point(axis, value)


def short(value: float) -> str:
    """A number as a person writes it: 2000, 2e+08 as 2e8, 1.5e+15 as 1.5e15."""
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    mantissa, _, exponent = f"{value:.6g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def history_points(run: Run, metric: str, axis: str) -> list[tuple[float, float]]:
    """(position on `axis`, `metric`) at each validation that recorded both, in order."""
    field = AXES[axis]
    points = [
        (entry[field], entry[metric])
        for entry in run.history
        if entry.get(field) is not None and entry.get(metric) is not None
    ]
    return sorted(points, key=lambda point: point[0])


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """The value at `x` on the polyline through `points` (sorted by x): exact at a point,
    linear between the two around it; None outside them."""
    xs = [point[0] for point in points]
    if not points or x < xs[0] or x > xs[-1]:
        return None
    i = bisect_left(xs, x)
    if xs[i] == x:
        return points[i][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def value_at(run: Run, metric: str, point: Point | None) -> float | None:
    """The run's `metric` where a comparison reads it: the final value when `point` is None,
    else its history's value at the point (`interpolate`); None where it has none."""
    if point is None:
        return run.metrics.get(metric)
    return interpolate(history_points(run, metric, point.axis), point.value)


def shortfall(run: Run, metric: str, point: Point) -> str | None:
    """Why the run has no `metric` at `point`, with how far its history got; None if it has."""
    if value_at(run, metric, point) is not None:
        return None
    if not any(entry.get(metric) is not None for entry in run.history):
        return f"no {metric} in its history" + (f" ({run.status})" if run.status else "")
    points = history_points(run, metric, point.axis)
    if not points:
        return f"no {point.field} in its history (written before {RESULTS_FILE} counted it)"
    (first, _), (last, _) = points[0], points[-1]
    if point.value < first:
        return f"validated first at {point.axis}={short(first)}"
    steps = [e.get("step") for e in run.history if e.get(point.field) == last]
    known = point.axis != "step" and steps and steps[0] is not None
    at_step = f" at step {int(steps[0])}" if known else ""
    return f"reached {point.axis}={short(last)}{at_step}"


def lacking_axis(runs: Sequence[Run], metric: str, axis: str) -> list[Run]:
    """The runs that validated `metric` but recorded no `axis` beside it (older runs)."""
    return [
        run
        for run in runs
        if any(entry.get(metric) is not None for entry in run.history)
        and not history_points(run, metric, axis)
    ]
