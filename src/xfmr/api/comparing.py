"""Runs side by side as a pandas DataFrame: `xfmr-compare`'s table, its columns and grouping."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas and the comparison load when a table is made
    from xfmr.runs.compare.comparison import Comparison


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
