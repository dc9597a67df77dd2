"""One comparison, as `xfmr-compare` and `xfmr.compare` make it: the runs found under the paths,
the metric and direction that rank them, the grouping keys, and the tables (grouped first)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xfmr.errors import UserError
from xfmr.runs.compare.baseline import Questions
from xfmr.runs.compare.points import parse_point, shortfall
from xfmr.runs.compare.runs import Run, find_runs, metric_names, optimized_metric, sweep_direction
from xfmr.runs.compare.table import (
    SEED,
    Ranking,
    Table,
    baseline_setting,
    differing_keys,
    group_table,
    grouping_keys,
    run_labels,
    run_table,
)

DEFAULT_METRIC = "val/loss"


@dataclass(frozen=True)
class Comparison:
    """Runs side by side.

    Attributes:
        runs: the runs compared.
        ranking: the metric that orders them and its direction.
        keys: the overrides that define a setting; None: a row per run.
        tables: the grouped table then the per-run one, or the per-run one alone.
    """

    runs: list[Run]
    ranking: Ranking
    keys: list[str] | None
    tables: list[Table]


def compare_runs(
    paths: Sequence[str | Path],
    *,
    metric: str | None = None,
    mode: str | None = None,
    group_by: str | None = None,
    no_group: bool = False,
    baseline: str | None = None,
    equivalence: float | None = None,
    detect: float | None = None,
    at: str | None = None,
) -> Comparison:
    """The runs under `paths` (run or sweep directories), ranked by `metric` (default: the
    runs' optimized_metric, else val/loss) in `mode` (min or max; default: the sweep's
    direction, else min), grouped by `group_by` (comma-separated override keys; default: every
    differing override but the seed) unless `no_group`, each setting against `baseline`
    (KEY=VALUE[,KEY=VALUE]) if given: with `equivalence`, whether the difference lies within
    ±equivalence; with `detect`, the seeds that would detect a difference of `detect`. The
    metric is each run's final value, or its value at `at` (step=N, tokens=N, flops=N or
    time=S: `points`)."""
    questions = Questions(equivalence=equivalence, detect=detect)
    check_questions(questions, baseline)
    point = None if at is None else parse_point(at)
    runs = find_runs(paths)
    chosen = choose_metric(runs, metric)
    ranking = Ranking(chosen, mode or sweep_direction(runs, chosen) or "min", point)
    keys = grouping_keys(runs, group_by, no_group)
    if baseline is not None:
        if no_group:
            raise UserError(f"--baseline {baseline}: compares settings; drop --no-group")
        keys = keys if keys is not None else [k for k in differing_keys(runs) if k != SEED]
    per_run = run_table(runs, ranking)
    base = None if baseline is None else baseline_setting(runs, keys, baseline)
    grouped = None if keys is None else group_table(runs, keys, ranking, base, questions)
    tables = [per_run] if grouped is None else [grouped, per_run]
    if point is not None:
        tables = [read_at_point(table, runs, ranking) for table in tables]
    return Comparison(runs, ranking, keys, tables)


FINAL = "final "  # how the tables name the columns of the metric's final value


def read_at_point(table: Table, runs: Sequence[Run], ranking: Ranking) -> Table:
    """A table whose metric columns hold the values at `ranking.at` (`table.metric_value`),
    renamed from "final val/loss ..." to "val/loss at tokens=2e8 ...", with the runs that have
    no value there named below it, each with how far it got."""
    renamed = {
        column: ranking.quantity + column.removeprefix(FINAL + ranking.metric)
        for column in table.columns
        if column.startswith(FINAL + ranking.metric)
    }
    rows = [
        {renamed.get(column, column): value for column, value in row.items()} for row in table.rows
    ]
    labels = run_labels(runs)
    missing = [
        f"{labels[run.path]}: {reason}"
        for run in runs
        if (reason := shortfall(run, ranking.metric, ranking.at)) is not None
    ]
    notes = [
        f"{ranking.quantity}: read off each run's history, linearly interpolated between the "
        "two validations around it; best: over all of a run's validations."
    ]
    if missing:
        notes.append(
            f"Not at {ranking.at}, so in no mean or test: {len(missing)} of {len(runs)} runs: "
            + "; ".join(missing)
        )
    columns = [renamed.get(column, column) for column in table.columns]
    ranked = tuple(renamed.get(column, column) for column in table.ranked)
    return Table(table.title, columns, rows, (*table.notes, *notes), ranked, table.names)


def choose_metric(runs: list[Run], requested: str | None) -> str:
    """`--metric` if some run has it; else the metric the runs optimized."""
    if requested is None:
        return optimized_metric(runs) or DEFAULT_METRIC
    available = metric_names(runs)
    if requested not in available:
        have = ", ".join(available) or "none (no run has validated yet)"
        raise UserError(f"--metric {requested}: no run has it; the runs have: {have}")
    return requested


def check_questions(questions: Questions, baseline: str | None) -> None:
    """--equivalence and --detect: a positive number of the metric's units, against a baseline."""
    for flag, value in (("--equivalence", questions.equivalence), ("--detect", questions.detect)):
        if value is None:
            continue
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{flag} {value:g}: give a positive number, in the metric's units")
        if baseline is None:
            raise UserError(
                f"{flag} {value:g}: asks about each setting against a baseline; add "
                "--baseline KEY=VALUE"
            )
