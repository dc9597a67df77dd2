"""Which of the swept parameters mattered, by Optuna's own evaluators:

    fANOVA      the share of the metric's variance each parameter explains in a random forest
                fitted to the runs (Hutter et al. 2014)
    PED-ANOVA   how much each parameter's distribution among the best 10% of runs differs from
                its distribution among all of them (Watanabe et al. 2023)

A search's study is read from its sweep's storage (`sweep.json` names it); a grid, or runs from
several sweeps, become a study in memory with one trial per finished run, each parameter's
distribution inferred from the values the runs took. Optuna loads only here.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xfmr.run_dir.files import JOURNAL_FILE, SWEEP_FILE
from xfmr.runs.compare.runs import Run, read_json
from xfmr.runs.compare.table import COMPLETED, SEED, Ranking, Table, differing_keys, metric_value

# PED-ANOVA contrasts the best 10% of runs (Optuna's default target_quantile) with all of them;
# below 11 finished runs that best 10% is one run, a point rather than a distribution, and
# fANOVA's forest would be fitted to as few points as there are settings. Fewer: no figures.
MIN_FINISHED = 11
EVALUATORS = ("fANOVA", "PED-ANOVA")
LOG_SPAN = 100  # positive numbers spanning two decades or more are searched on a log scale


@dataclass(frozen=True)
class Importance:
    """Each evaluator's importance of each parameter (summing to 1 per evaluator), or why there
    is none (`reason`)."""

    source: str
    finished: int
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    reason: str | None = None


def parameter_importance(runs: Sequence[Run], ranking: Ranking) -> Importance:
    """From the search's stored study when the runs are one search optimizing the ranked
    metric at their end, else from the runs (at `ranking.at`, when given: `metric_value`)."""
    study = stored_study(runs, ranking.metric) if ranking.at is None else None
    if study is not None:
        return evaluate(study, f"the Optuna study {study.study_name!r}")
    keys = [key for key in differing_keys(runs) if key != SEED]
    finished = [
        run for run in runs if run.status == COMPLETED and _finite(metric_value(run, ranking))
    ]
    source = "the finished runs as Optuna trials"
    if len(finished) < MIN_FINISHED or len(keys) < 2:
        return _too_few(source, len(finished), keys)
    return evaluate(runs_study(finished, keys, ranking), source)


def _too_few(source: str, finished: int, params: Sequence[str]) -> Importance:
    if finished < MIN_FINISHED:
        reason = (
            f"{finished} finished runs; importance needs at least {MIN_FINISHED} (the best 10% "
            "PED-ANOVA looks at must hold two runs)"
        )
    else:
        varied = ", ".join(params) or "none but the seed"
        reason = (
            f"parameters that vary: {varied}; importance weighs two or more against each "
            "other (compare settings with --baseline instead)"
        )
    return Importance(source, finished, reason=reason)


def stored_study(runs: Sequence[Run], metric: str) -> Any | None:
    """The study of the one search the runs belong to, if its storage can be read."""
    sweep_dirs = {run.path.parent for run in runs}
    if len(sweep_dirs) != 1:
        return None
    sweep_dir = sweep_dirs.pop()
    if not (sweep_dir / SWEEP_FILE).is_file():
        return None
    sweep = read_json(sweep_dir / SWEEP_FILE)
    if sweep.get("kind") != "search" or sweep.get("optimized_metric", metric) != metric:
        return None
    storage = _storage(sweep_dir, sweep.get("storage"))
    if storage is None or not sweep.get("study_name"):
        return None
    import optuna

    from xfmr.sweeps.search import open_storage

    _quiet(optuna)
    try:
        return optuna.load_study(study_name=sweep["study_name"], storage=open_storage(storage))
    except (KeyError, ValueError, OSError):  # moved, renamed, or another machine's database
        return None


def _storage(sweep_dir: Path, recorded: Any) -> str | None:
    """The recorded storage, or the journal beside the runs when the sweep was copied here."""
    if isinstance(recorded, str) and ("://" in recorded or Path(recorded).is_file()):
        return recorded
    beside = sweep_dir / JOURNAL_FILE
    return str(beside) if beside.is_file() else None


def runs_study(finished: Sequence[Run], keys: Sequence[str], ranking: Ranking) -> Any:
    """An in-memory study with a trial per run: its overrides as params, the metric as value."""
    import optuna
    from optuna.trial import create_trial

    _quiet(optuna)
    distributions = {
        key: distribution([run.overrides.get(key) for run in finished]) for key in keys
    }
    study = optuna.create_study(direction="minimize" if ranking.direction == "min" else "maximize")
    study.add_trials(
        [
            create_trial(
                params={key: _param(run.overrides.get(key), distributions[key]) for key in keys},
                distributions=distributions,
                value=metric_value(run, ranking),
            )
            for run in finished
        ]
    )
    return study


def distribution(values: Sequence[str | None]) -> Any:
    """Whole numbers as an int range, other numbers as a float range (log-scaled when they span
    LOG_SPAN), anything else (or a run without the override) as categories."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    numbers = [_number(value) for value in values]
    if any(number is None for number in numbers):
        return CategoricalDistribution(sorted({str(value) for value in values}))
    low, high = min(numbers), max(numbers)
    log = low > 0 and high / low >= LOG_SPAN
    if all(
        float(number).is_integer() and "." not in str(v)
        for number, v in zip(numbers, values, strict=True)
    ):
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(low, high, log=log)


def evaluate(study: Any, source: str) -> Importance:
    """Both evaluators' importances, normalized (Optuna's default) so each sums to 1."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator
    from optuna.trial import TrialState

    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = sorted({name for trial in finished for name in trial.distributions})
    if len(finished) < MIN_FINISHED or len(params) < 2:
        return _too_few(source, len(finished), params)
    evaluators = {
        "fANOVA": FanovaImportanceEvaluator(seed=0),  # a fixed forest: the same runs, same figures
        "PED-ANOVA": PedAnovaImportanceEvaluator(),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-API and few-trials-per-regime notices
        values = {
            name: optuna.importance.get_param_importances(study, evaluator=evaluator)
            for name, evaluator in evaluators.items()
        }
    return Importance(source, len(finished), values)


def importance_table(importance: Importance, metric: str) -> Table:
    """A row per parameter, most important (by fANOVA) first."""
    title = f"Which parameters mattered for {metric}: {importance.finished} finished runs, from {importance.source}"
    if importance.reason:
        return Table(f"{title}: not computed: {importance.reason}", ["parameter"], [])
    fanova = importance.values["fANOVA"]
    rows = [
        {"parameter": name, **{e: importance.values[e].get(name) for e in EVALUATORS}}
        for name in sorted(fanova, key=lambda name: -fanova[name])
    ]
    note = "fANOVA: share of variance; PED-ANOVA: how the best 10% differ; each sums to 1"
    return Table(f"{title} ({note})", ["parameter", *EVALUATORS], rows)


def _param(value: str | None, dist: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return str(value)
    return int(float(value)) if isinstance(dist, IntDistribution) else float(value)


def _number(value: str | None) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _quiet(optuna: Any) -> None:
    """No 'A new study created in memory' on the terminal of a read-only command."""
    optuna.logging.set_verbosity(logging.WARNING)
