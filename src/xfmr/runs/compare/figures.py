"""The metric's curve of each run, from the validations its results.json keeps, as data for any
plot and as a PNG (matplotlib, loaded only here)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xfmr.runs.compare.runs import Run, integer
from xfmr.runs.compare.table import differing_keys, run_labels


@dataclass(frozen=True)
class Curve:
    """One run's metric per validation step, named by the overrides that set it apart."""

    label: str
    steps: list[int]
    values: list[float]


def metric_curves(runs: Sequence[Run], metric: str) -> list[Curve]:
    """A curve for each run that validated `metric` at least once."""
    names = curve_names(runs)
    curves = []
    for run in runs:
        points = [
            (integer(entry.get("step")), entry[metric])
            for entry in run.history
            if entry.get(metric) is not None and integer(entry.get("step")) is not None
        ]
        if points:
            steps, values = zip(*points, strict=True)
            curves.append(Curve(names[run.path], list(steps), list(values)))
    return curves


def curve_names(runs: Sequence[Run]) -> dict[Path, str]:
    """`pos=learned, seed=1` from the differing overrides; the directory where that is not
    enough to tell runs apart."""
    keys, labels = differing_keys(runs), run_labels(runs)
    names = {
        run.path: ", ".join(f"{key}={run.overrides.get(key, '-')}" for key in keys) for run in runs
    }
    repeated = Counter(names.values())

    def unique(path: Path, name: str) -> str:
        if not name:
            return labels[path]
        return f"{name} ({labels[path]})" if repeated[name] > 1 else name

    return {path: unique(path, name) for path, name in names.items()}


def save_curves_png(curves: Sequence[Curve], metric: str, path: Path) -> None:
    """Every curve on one axes, written to `path` (its suffix picks the format: png, svg, pdf)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(figure)  # no pyplot: nothing global, no display needed
    axes = figure.add_subplot()
    for curve in curves:
        axes.plot(curve.steps, curve.values, marker="o", markersize=3, label=curve.label)
    axes.set(xlabel="step", ylabel=metric, title=f"{metric} at each validation")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    if curves:
        axes.legend(fontsize="small")
    else:
        axes.text(0.5, 0.5, f"no run has validated {metric}", ha="center", transform=axes.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
