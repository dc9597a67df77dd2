"""Runs side by side: as a pandas DataFrame (`compare`), and as `xfmr-compare` prints and writes
them (`report`: the table, which parameters mattered, the curves, the HTML page)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xfmr.runs.compare.formats import FORMATS
from xfmr.runs.compare.points import AXES

if TYPE_CHECKING:  # pandas, the comparison and Optuna load when a table is made
    from xfmr.runs.compare.comparison import Comparison
    from xfmr.runs.compare.importance import Importance
    from xfmr.runs.compare.runs import Run
    from xfmr.runs.compare.table import Ranking, Table

__all__ = ["AXES", "FORMATS", "compare", "report"]
TEXT_FORMATS = ("table", "markdown")  # for a person: the importance table follows the main one


def compare(
    *runs: str | Path | Any,
    metric: str | None = None,
    mode: str | None = None,
    group_by: str | Sequence[str] | None = None,
    group: bool = True,
    baseline: str | None = None,
    equivalence: float | None = None,
    detect: float | None = None,
    at: str | None = None,
) -> Any:
    """The table `xfmr-compare` prints for `runs`, as a DataFrame.

    Args:
        *runs: run directories, sweep directories, directories of sweeps, or `xfmr.Run` objects
            (one by one or as one list).
        metric: the metric to rank by (default: the runs' optimized_metric, else val/loss).
        mode: "min" or "max" (default: the sweep's direction, else min).
        group_by: the overrides that define a setting (default: every override that differs
            between runs, except seed, when some setting has more than one run).
        group: False for a row per run.
        baseline: the setting each other is compared with, e.g. "pos=learned".
        equivalence: with a baseline, test whether each difference lies within ±equivalence
            (TOST), in the metric's units.
        detect: with a baseline, the seeds per setting that would detect this difference with
            80% power.
        at: where each run's metric is read, as `xfmr-compare --at`: "step=N", "tokens=N",
            "flops=N" or "time=S", interpolated between validations (default: its end).

    Returns:
        One row per setting (mean, std and 95% interval over its completed runs, n) or per
        run, best first; `.attrs` holds the title, the metric and its direction, and `notes`
        (with `at`: which runs have no value there).
    """
    from xfmr.runs.compare.comparison import compare_runs

    if len(runs) == 1 and isinstance(runs[0], list | tuple):
        runs = tuple(runs[0])
    paths = [getattr(run, "path", run) for run in runs]
    keys = group_by if group_by is None or isinstance(group_by, str) else ",".join(group_by)
    found = compare_runs(
        paths,
        metric=metric,
        mode=mode,
        group_by=keys,
        no_group=not group,
        baseline=baseline,
        equivalence=equivalence,
        detect=detect,
        at=at,
    )
    return _frame(found)


def _frame(found: Comparison) -> Any:
    """The first table of a `compare_runs` result (grouped, when it groups) as a DataFrame,
    its title, metric, direction and notes in `.attrs`."""
    import pandas as pd

    table = found.tables[0]
    frame = pd.DataFrame(table.rows, columns=table.columns)
    frame.attrs.update(
        title=table.title,
        metric=found.ranking.metric,
        mode=found.ranking.direction,
        notes=list(table.notes),
    )
    return frame


def report(
    paths: Sequence[str | Path],
    *,
    form: str = "table",
    plot: Path | None = None,
    html: Path | None = None,
    axis: str | None = None,
    group: bool = True,
    **comparing: Any,
) -> None:
    """What `xfmr-compare` prints and writes: the table in `form` (with, for a person, which
    parameters mattered), the metric's curves as a `plot` image against `axis`, the `html`
    page. `comparing`: `compare`'s settings (metric, mode, group_by, baseline, ...)."""
    from xfmr.runs.compare.comparison import compare_runs
    from xfmr.runs.compare.formats import render

    found = compare_runs(list(paths), no_group=not group, **comparing)
    runs, ranking, keys, tables = found.runs, found.ranking, found.keys, found.tables
    render(tables[0], form)
    importance = weigh_parameters(runs, ranking) if form in TEXT_FORMATS or html else None
    if importance is not None and form in TEXT_FORMATS:
        show_importance(importance, ranking.quantity, form)
    if plot:
        write_plot(plot, runs, ranking, keys, axis)
    if html:
        write_html(html, tables, runs, ranking, keys, importance)


def write_plot(
    path: Path, runs: list[Run], ranking: Ranking, keys: list[str] | None, axis: str | None
) -> None:
    from xfmr.runs.compare.figures import left_out, metric_curves, save_curves_png

    axis = axis or (ranking.at.axis if ranking.at else "step")
    curves = metric_curves(runs, ranking.metric, keys, axis=axis)
    save_curves_png(curves, ranking.metric, path, axis=axis)
    print(f"wrote {path}", file=sys.stderr)
    if note := left_out(runs, ranking.metric, axis):
        print(note, file=sys.stderr)


def weigh_parameters(runs: list[Run], ranking: Ranking) -> Importance | None:
    """Which parameters mattered, when the runs differ in more than the seed (csv and json stay
    one table for scripts)."""
    from xfmr.runs.compare.table import SEED, differing_keys

    if not [key for key in differing_keys(runs) if key != SEED]:
        return None
    from xfmr.runs.compare.importance import parameter_importance

    return parameter_importance(runs, ranking)


def show_importance(importance: Importance, metric: str, form: str) -> None:
    from xfmr.runs.compare.formats import render, wrapped
    from xfmr.runs.compare.importance import importance_table

    table = importance_table(importance, metric)
    print()
    if importance.reason:  # a sentence, not an empty table
        print(f"**{table.title}**" if form == "markdown" else wrapped(table.title))
    else:
        render(table, form)


def write_html(
    path: Path,
    tables: list[Table],
    runs: list[Run],
    ranking: Ranking,
    keys: list[str] | None,
    importance: Importance | None,
) -> None:
    from xfmr.runs.compare.page import write_page

    write_page(
        path,
        tables=tables,
        keys=keys,
        runs=runs,
        ranking=ranking,
        importance=importance,
    )
    print(f"wrote {path}", file=sys.stderr)
