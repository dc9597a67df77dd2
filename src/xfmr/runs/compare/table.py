"""The rows of a comparison: one per run, or one per setting (the runs that share the grouping
overrides) with the mean and sample std over its completed runs. Cells are plain values (str,
int, float, None) that `formats` prints."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.runs.compare.baseline import (
    DELTA_COLUMNS,
    EFFECT,
    P_COLUMNS,
    TEST,
    Questions,
    against_baseline,
    footnote,
    seeds_column,
    verdict_column,
)
from xfmr.runs.compare.points import Point, value_at
from xfmr.runs.compare.runs import SEED, Run, integer
from xfmr.runs.compare.stats import MIN_RUNS, mean_interval

COMPLETED = "completed"


@dataclass(frozen=True)
class Table:
    """Rows in display order, each a mapping over `columns`, and lines said below them;
    `ranked`: the columns a narrow view shows first, most needed first (the others follow in
    table order); `names`: the columns that name a row (its run, or its setting)."""

    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: tuple[str, ...] = ()
    ranked: tuple[str, ...] = ()
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ranking:
    """The metric that orders runs, and whether lower (min) or higher (max) is better."""

    metric: str
    direction: str = "min"
    at: Point | None = None  # where each run's metric is read (`points`); None: its final value

    def key(self, value: float | None) -> tuple[bool, float]:
        """Sort key: best first; missing and NaN last."""
        if value is None or math.isnan(value):
            return (True, 0.0)
        return (False, value if self.direction == "min" else -value)

    @property
    def quantity(self) -> str:
        """What is compared: the metric, and where it is read unless at the end."""
        return self.metric if self.at is None else f"{self.metric} at {self.at}"

    def describe(self) -> str:
        where = "" if self.at is None else " (interpolated between validations)"
        better = "lower" if self.direction == "min" else "higher"
        return f"{self.quantity}{where}, {better} is better"


def metric_value(run: Run, ranking: Ranking) -> float | None:
    """The run's value of the ranked metric where the comparison reads it: its final value, or
    its history's at `ranking.at`. Every row, statistic and test reads a run's metric here."""
    return value_at(run, ranking.metric, ranking.at)


def differing_keys(runs: Sequence[Run]) -> list[str]:
    """The override keys whose value is not the same in every run (absent counts as a value),
    in the order they first appear."""
    keys = dict.fromkeys(key for run in runs for key in run.overrides)
    return [key for key in keys if len({run.overrides.get(key) for run in runs}) > 1]


def run_labels(runs: Sequence[Run]) -> dict[Path, str]:
    """Each run's directory relative to the parent of the directory that holds them all
    (`sweep/0`, `sweep/1`, ...)."""
    resolved = [run.path.resolve() for run in runs]
    base = Path(os.path.commonpath(resolved)).parent
    return {run.path: str(path.relative_to(base)) for run, path in zip(runs, resolved, strict=True)}


def grouping_keys(runs: Sequence[Run], group_by: str | None, no_group: bool) -> list[str] | None:
    """The overrides that define a setting, or None for a row per run. By default every
    differing override but the seed, when that puts more than one run in some setting."""
    if no_group:
        return None
    if group_by is not None:
        keys = [key.strip() for key in group_by.split(",") if key.strip()]
        known = sorted({key for run in runs for key in run.overrides})
        unknown = [key for key in keys if key not in known]
        if unknown:
            raise UserError(
                f"--group-by {group_by}: no run has the override {', '.join(unknown)}; "
                f"the runs' overrides are: {', '.join(known) or 'none'}"
            )
        return keys
    keys = [key for key in differing_keys(runs) if key != SEED]
    sizes = Counter(setting(run, keys) for run in runs)
    return keys if max(sizes.values()) > 1 else None


def baseline_setting(runs: Sequence[Run], keys: Sequence[str], spec: str) -> tuple[str | None, ...]:
    """The setting `--baseline KEY=VALUE[,KEY=VALUE...]` names: the one setting of `keys` whose
    values it matches (a key it leaves out matches any value)."""
    settings = sorted({setting(run, keys) for run in runs}, key=str)
    valid = "; ".join(describe_setting(keys, values) for values in settings)
    # Split at commas that start a new KEY=, so a value like [1,2] keeps its comma.
    pairs = [pair for pair in re.split(r",(?=[^,=\[\]]+=)", spec) if pair.strip()]
    wanted = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or key.strip() not in keys:
            raise UserError(
                f"--baseline {spec}: give KEY=VALUE with KEY among the grouping keys "
                f"({', '.join(keys) or 'none'}); the settings are: {valid}"
            )
        wanted[key.strip()] = value.strip()
    matches = [
        values
        for values in settings
        if all(dict(zip(keys, values, strict=True))[key] == value for key, value in wanted.items())
    ]
    if len(matches) != 1:
        found = "no setting" if not matches else f"{len(matches)} settings"
        raise UserError(f"--baseline {spec}: matches {found}; the settings are: {valid}")
    return matches[0]


def setting(run: Run, keys: Sequence[str]) -> tuple[str | None, ...]:
    return tuple(run.overrides.get(key) for key in keys)


def best_value(run: Run, ranking: Ranking) -> tuple[float | None, int | None]:
    """The best value the metric reached over the run's validations, and at which step."""
    points = [
        (entry[ranking.metric], integer(entry.get("step")))
        for entry in run.history
        if entry.get(ranking.metric) is not None
    ]
    if not points:  # no history: the best validation results.json records
        return run.best.get(ranking.metric), integer(run.best.get("step"))
    return min(points, key=lambda point: ranking.key(point[0]))


def note(run: Run) -> str:
    """Why a run did not complete: where it stopped, and the reason it gives."""
    if run.status == COMPLETED:
        return ""
    stopped = [f"stopped at step {run.step}"] if run.step is not None else []
    return "; ".join([*stopped, *([run.reason] if run.reason else [])])


def run_table(runs: Sequence[Run], ranking: Ranking) -> Table:
    """One row per run, best first; failed and pruned runs included, with their note."""
    labels, keys, metric = run_labels(runs), differing_keys(runs), ranking.metric
    ordered = sorted(
        runs, key=lambda run: (ranking.key(metric_value(run, ranking)), labels[run.path])
    )
    rows = []
    for run in ordered:
        best, best_step = best_value(run, ranking)
        rows.append(
            {
                "run": labels[run.path],
                **dict(zip(keys, setting(run, keys), strict=True)),
                "status": run.status,
                f"final {metric}": metric_value(run, ranking),
                f"best {metric}": best,
                "best step": best_step,
                "steps": run.step,
                "ms/step": run.ms_per_step,
                "params": run.n_parameters,
                "note": note(run),
            }
        )
    columns = list(rows[0]) if rows else ["run"]
    # The run and its metric first: the overrides that differ may be more than fit.
    ranked = ("run", f"final {metric}", "status", *keys, "note", f"best {metric}", "best step")
    title = f"{len(runs)} runs: {ranking.describe()}"
    return Table(title, columns, rows, ranked=ranked, names=("run",))


def group_table(
    runs: Sequence[Run],
    keys: Sequence[str],
    ranking: Ranking,
    baseline: tuple[str | None, ...] | None = None,
    questions: Questions | None = None,
) -> Table:
    """One row per setting of `keys`: mean, sample std (ddof=1) and the 95% t interval of the
    mean over its completed runs, n, how many ended otherwise and why; with a `baseline`
    setting, each other setting's difference to it (the paired t-test where the seeds pair,
    else Welch's; Holm-corrected) and what `questions` asks besides; best setting first."""
    labels, questions = run_labels(runs), questions or Questions()
    groups: dict[tuple[str | None, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(setting(run, keys), []).append(run)
    others = sorted({run.status for run in runs} - {COMPLETED})
    rows = {
        values: _group_row(
            dict(zip(keys, values, strict=True)) or {"group": "all runs"},
            members,
            others,
            labels,
            ranking,
        )
        for values, members in groups.items()
    }
    if baseline is not None:
        _compare_with_baseline(rows, groups, baseline, ranking, questions)
    ordered = sorted(
        rows.values(), key=lambda row: ranking.key(row[f"final {ranking.metric} mean"])
    )
    by = ", ".join(keys) or "nothing (all runs together)"
    title = (
        f"{len(runs)} runs in {len(rows)} settings of {by}: mean ± std and {CI} of the mean over "
        f"completed runs; {ranking.describe()}"
    )
    if baseline is not None:
        title += "; " + footnote(describe_setting(keys, baseline), len(rows) - 1, questions)
    ranked = _ranked_group_columns(keys, others, ranking.metric, questions)
    names = tuple(keys) or ("group",)
    return Table(title, list(ordered[0]), ordered, ranked=ranked, names=names)


def _ranked_group_columns(
    keys: Sequence[str], others: Sequence[str], metric: str, questions: Questions
) -> tuple[str, ...]:
    """A grouped table's columns, most needed first: the setting and its mean; its difference
    to the baseline, whether it counts and what was asked besides; the spread, the runs that
    did not complete and the note; then the intervals, the tests' workings and the best
    values. Columns the table lacks (no baseline) are passed over."""
    final = f"final {metric}"
    asked = [] if questions.equivalence is None else [verdict_column(questions.equivalence)]
    asked += [] if questions.detect is None else [seeds_column(questions.detect)]
    return (
        "group",
        *keys,
        "n",
        f"{final} mean",
        DELTA_COLUMNS[0],
        *P_COLUMNS[1:],
        *asked,
        f"{final} std",
        *others,
        "note",
        f"{final} {CI} low",
        f"{final} {CI} high",
        *DELTA_COLUMNS[1:],
        TEST,
        EFFECT,
        P_COLUMNS[0],
        f"best {metric} mean",
        f"best {metric} std",
    )


CI = "95% CI (t)"


def describe_setting(keys: Sequence[str], values: Sequence[str | None]) -> str:
    return ", ".join(f"{key}={value}" for key, value in zip(keys, values, strict=True))


def completed_values(members: Sequence[Run], ranking: Ranking) -> list[float]:
    """The metric of each completed run that has one where the comparison reads it
    (`metric_value`; NaN included: it is a result)."""
    values = [metric_value(run, ranking) for run in members if run.status == COMPLETED]
    return [value for value in values if value is not None]


def seeded_values(members: Sequence[Run], ranking: Ranking) -> list[tuple[str | None, float]]:
    """`completed_values` run by run, each with the run's seed: what pairs seed by seed."""
    return [(run.seed, value) for run in members for value in completed_values([run], ranking)]


def _compare_with_baseline(
    rows: dict[tuple[str | None, ...], dict[str, Any]],
    groups: dict[tuple[str | None, ...], list[Run]],
    baseline: tuple[str | None, ...],
    ranking: Ranking,
    questions: Questions,
) -> None:
    """Fills each row in place with its comparison to the baseline (`baseline.against_baseline`:
    the test, Δ, effect size, p-values and what `questions` asks besides)."""
    samples = {values: seeded_values(members, ranking) for values, members in groups.items()}
    cells = against_baseline(samples, baseline, questions)
    for values, row in rows.items():
        added = cells[values]
        if "note" in added:
            row["note"] = _joined(row["note"], added.pop("note"))
        # The comparison reads beside the mean's interval, before the best value.
        after = list(row).index(f"final {ranking.metric} {CI} high") + 1
        items = list(row.items())
        row.clear()
        row.update(items[:after] + list(added.items()) + items[after:])


def _group_row(
    values: dict[str, Any],
    members: list[Run],
    others: list[str],
    labels: dict[Path, str],
    ranking: Ranking,
) -> dict[str, Any]:
    completed = [run for run in members if run.status == COMPLETED]
    finals = completed_values(members, ranking)
    final = spread(finals)
    interval = mean_interval(finals) if all(math.isfinite(v) for v in finals) else None
    best = spread([best_value(run, ranking)[0] for run in completed])
    notes = [_outcome(run, labels[run.path]) for run in members if run.status != COMPLETED]
    valueless = [labels[run.path] for run in completed if metric_value(run, ranking) is None]
    if valueless:
        where = "" if ranking.at is None else f" at {ranking.at}"
        notes.append(f"no {ranking.metric}{where}: {', '.join(valueless)}")
    if len(finals) < MIN_RUNS:
        notes.append(f"n={len(finals)}: no std or CI (needs {MIN_RUNS} completed runs)")
    return {
        **values,
        "n": len(completed),
        **{status: sum(run.status == status for run in members) for status in others},
        f"final {ranking.metric} mean": final[0],
        f"final {ranking.metric} std": final[1],
        f"final {ranking.metric} {CI} low": interval[0] if interval else None,
        f"final {ranking.metric} {CI} high": interval[1] if interval else None,
        f"best {ranking.metric} mean": best[0],
        f"best {ranking.metric} std": best[1],
        "steps": central([run.step for run in completed]),
        "ms/step": central([run.ms_per_step for run in completed]),
        "params": central([run.n_parameters for run in completed]),
        "note": "; ".join(notes),
    }


def _joined(note: str, addition: str) -> str:
    return f"{note}; {addition}" if note else addition


def _outcome(run: Run, label: str) -> str:
    reason = note(run)
    return f"{label} {run.status}" + (f": {reason}" if reason else "")


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1) of the values present; no std for one."""
    present = [value for value in values if value is not None]
    if not present:
        return None, None
    mean = sum(present) / len(present)
    if len(present) == 1:
        return mean, None
    variance = sum((value - mean) ** 2 for value in present) / (len(present) - 1)
    return mean, math.sqrt(variance)


def central(values: Sequence[float | int | None]) -> float | int | None:
    """The value every run shares (steps, parameters), else their mean."""
    present = [value for value in values if value is not None]
    if len(set(present)) == 1:
        return present[0]
    return spread(present)[0]
