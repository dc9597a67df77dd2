"""The metric's curves, from the validations each results.json keeps: one colour per setting,
named by the overrides that tell the settings apart (`pos=rotary`), its mean over the setting's
completed runs with a band of ± one std, each run faint beneath.
Against the step, or the training tokens, FLOPs or seconds at each validation (`points.AXES`).
As data for any plot, and as a PNG (matplotlib, loaded only here)."""

from __future__ import annotations

import colorsys
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from xfmr.runs.compare.points import AXIS_TITLES, history_points, interpolate, lacking_axis
from xfmr.runs.compare.runs import AXES, Run
from xfmr.runs.compare.table import (
    COMPLETED,
    describe_setting,
    differing_keys,
    run_labels,
    setting,
    spread,
)

# matplotlib's tab10 (also plotly's D3): distinct to most eyes; more settings than this get
# hues spaced evenly round the wheel instead, so no two settings ever share a colour.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
BAND = "± 1 std over the setting's completed runs"


@dataclass(frozen=True)
class Curve:
    """One run's metric at each validation, `x` its step (or tokens, FLOPs, seconds)."""

    label: str
    x: list[float]
    values: list[float]


@dataclass(frozen=True)
class SettingCurves:
    """A setting's runs and, at each x some completed run validated at, their mean and std over
    the runs whose validations span it, each read off its curve (`points.interpolate`: exact
    at its own validations; std None where fewer than two span it)."""

    label: str
    colour: str
    runs: list[Curve]
    x: list[float]
    mean: list[float]
    std: list[float | None]


def colours(count: int) -> list[str]:
    if count <= len(PALETTE):
        return list(PALETTE[:count])
    hues = [colorsys.hsv_to_rgb(i / count, 0.75, 0.85) for i in range(count)]
    return ["#" + "".join(f"{round(255 * c):02x}" for c in rgb) for rgb in hues]


def metric_curves(
    runs: Sequence[Run], metric: str, keys: Sequence[str] | None, *, axis: str = "step"
) -> list[SettingCurves]:
    """A curve per run that validated `metric` against `axis` (step, tokens, flops or time),
    gathered by setting of `keys` (None: each run its own setting), settings in the order
    first found. Runs whose history lacks the axis have no curve (`left_out` names them)."""
    labels = run_labels(runs)
    groups: dict[object, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.path if keys is None else setting(run, keys), []).append(run)
    names = group_names(groups, keys, labels)
    gathered = []
    for group, members in groups.items():
        pairs = [(run, run_curve(run, metric, labels[run.path], axis)) for run in members]
        pairs = [(run, curve) for run, curve in pairs if curve is not None]
        if pairs:
            gathered.append((names[group], pairs))
    return [
        _setting_curves(name, colour, pairs)
        for (name, pairs), colour in zip(gathered, colours(len(gathered)), strict=True)
    ]


def group_names(
    groups: Mapping[object, Sequence[Run]],
    keys: Sequence[str] | None,
    labels: Mapping[Path, str],
) -> dict[object, str]:
    """Each group's name in a legend: the overrides whose values differ between the groups
    (`pos=rotary, optim.lr=3e-3`; with no grouping `keys`, each run a group, those that differ
    between the runs, the seed too). A run that no override tells apart is named by its
    directory as well; a single group of every run is "all runs"."""
    if keys is None:
        runs = [run for members in groups.values() for run in members]
        keys = differing_keys(runs)
        values = {group: setting(members[0], keys) for group, members in groups.items()}
    else:
        values = {group: group for group in groups}  # a group is its values of `keys`
    telling = [i for i, _ in enumerate(keys) if len({v[i] for v in values.values()}) > 1]
    names = {
        group: describe_setting([keys[i] for i in telling], [v[i] for i in telling])
        for group, v in values.items()
    }
    repeated = Counter(names.values())
    for group, members in groups.items():
        if len(members) == 1 and (repeated[names[group]] > 1 or not names[group]):
            directory = labels[members[0].path]
            names[group] = f"{names[group]} ({directory})" if names[group] else directory
    return {group: name or "all runs" for group, name in names.items()}


def run_curve(run: Run, metric: str, label: str, axis: str = "step") -> Curve | None:
    points = history_points(run, metric, axis)
    if not points:
        return None
    xs, values = zip(*points, strict=True)
    return Curve(label, list(xs), list(values))


def left_out(runs: Sequence[Run], metric: str, axis: str) -> str | None:
    """A sentence naming the runs that validated `metric` but have no curve against `axis`
    (their history lacks it: runs from before results.json counted it); None if none."""
    lacking = lacking_axis(runs, metric, axis)
    if not lacking:
        return None
    labels = run_labels(runs)
    return (
        f"Left out against {axis} ({len(lacking)} of {len(runs)} runs: their history has no "
        f"{AXES[axis]}): {', '.join(labels[run.path] for run in lacking)}"
    )


def _setting_curves(label: str, colour: str, pairs: list[tuple[Run, Curve]]) -> SettingCurves:
    curves = [curve for _, curve in pairs]
    # A pruned run stops where it was worst: the mean is over the runs that finished, unless
    # none did.
    averaged = [curve for run, curve in pairs if run.status == COMPLETED] or curves
    # Runs validate at the same steps, but not at the same seconds: each run is read off its
    # own curve at every x of the setting, where its validations span it.
    xs = sorted({x for curve in averaged for x in curve.x})
    polylines = [list(zip(curve.x, curve.values, strict=True)) for curve in averaged]
    spreads = []
    for x in xs:
        values = [interpolate(points, x) for points in polylines]
        spreads.append(spread([v for v in values if v is not None and math.isfinite(v)]))
    return SettingCurves(
        label=label,
        colour=colour,
        runs=curves,
        x=xs,
        mean=[m if m is not None else math.nan for m, _ in spreads],
        std=[s for _, s in spreads],
    )


def save_curves_png(
    settings: Sequence[SettingCurves], metric: str, path: Path, *, axis: str = "step"
) -> None:
    """Each setting's mean and band over its runs against `axis`, written to `path` (its
    suffix picks the format: png, svg, pdf)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(figure)  # no pyplot: nothing global, no display needed
    axes = figure.add_subplot()
    for curves in settings:
        for run in curves.runs:
            axes.plot(run.x, run.values, color=curves.colour, alpha=0.25, linewidth=0.8)
        n = len(curves.runs)
        axes.plot(curves.x, curves.mean, color=curves.colour, marker="o", markersize=3,
                  linewidth=2, label=f"{curves.label} (n={n})")  # fmt: skip
        low, high = band(curves)
        axes.fill_between(curves.x, low, high, color=curves.colour, alpha=0.2, linewidth=0)
    axes.set(
        xlabel=AXIS_TITLES[axis], ylabel=metric, title=f"{metric}: mean per setting, band {BAND}"
    )
    axes.title.set_fontsize("medium")
    axes.xaxis.set_major_locator(MaxNLocator(integer=axis != "time"))
    axes.grid(alpha=0.3)
    if settings:
        axes.legend(fontsize="small")
    else:
        empty = f"no run has validated {metric}" + (f" with {axis}" if axis != "step" else "")
        axes.text(0.5, 0.5, empty, ha="center", transform=axes.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def band(curves: SettingCurves) -> tuple[list[float], list[float]]:
    """mean - std and mean + std at each x; NaN (no band) where there is no std."""
    low = [
        m - s if s is not None else math.nan for m, s in zip(curves.mean, curves.std, strict=True)
    ]
    high = [
        m + s if s is not None else math.nan for m, s in zip(curves.mean, curves.std, strict=True)
    ]
    return low, high
