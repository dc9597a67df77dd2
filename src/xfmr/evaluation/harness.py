"""Run lm-eval tasks on a loaded run: `lm_eval.simple_evaluate` over `XfmrLM`, with the tasks
`xfmr.evaluation.tasks.prepare_tasks` lays out (the shipped ones, a `tasks_dir` of the user's).

Writes lm-eval's whole report to RUN/lm_eval.json, and each task's scores into RUN/results.json
under `metrics`, as `eval/<task>/<metric>` (and `eval/<task>/<metric>_centred`, (score - chance)
/ (1 - chance) as nanochat's CORE centres, where the task states its chance), so xfmr-compare
reads them as it reads any metric. results.json keeps everything else it held.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.evaluation.checks import require_lm_eval
from xfmr.files import write_json
from xfmr.run_dir.files import LM_EVAL_FILE, RESULTS_FILE
from xfmr.runs.loading import LoadedRun

PREFIX = "eval"
# The metrics a chance level applies to: the share of questions answered right.
CENTRED = ("acc", "acc_norm")


def task_metrics(results: Mapping[str, Mapping[str, Any]], chance: Mapping[str, float]) -> dict:
    """lm-eval's `results` ({task: {"acc,none": 0.5, "acc_stderr,none": ...}}) as
    `eval/<task>/<metric>`: numbers only, standard errors left in lm_eval.json (xfmr-compare
    takes its intervals over seeds); a filter other than lm-eval's `none` joins the name."""
    metrics: dict[str, float] = {}
    for task, scores in results.items():
        for key, value in scores.items():
            metric, _, kept_by = key.partition(",")
            if not kept_by or "_stderr" in metric or not isinstance(value, int | float):
                continue
            name = metric if kept_by == "none" else f"{metric}_{kept_by}"
            metrics[f"{PREFIX}/{task}/{name}"] = float(value)
            if metric in CENTRED and task in chance and chance[task] < 1:
                centred = (float(value) - chance[task]) / (1 - chance[task])
                metrics[f"{PREFIX}/{task}/{name}_centred"] = centred
    return metrics


def add_to_results(run_dir: Path, metrics: Mapping[str, float]) -> None:
    """Merge `metrics` into results.json's `metrics`, atomically; the rest stays as it was."""
    path = run_dir / RESULTS_FILE
    results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    results["metrics"] = {**(results.get("metrics") or {}), **metrics}
    write_json(path, results)  # through xfmr.files.atomic_path: renamed into place whole


def preparer() -> Callable[..., Any]:
    """`prepare_tasks(run, names, *, tasks_dir, work_dir)` -> its `include_path`, `names` and
    `chance`: the tasks xfmr ships, and a `tasks_dir` of the user's."""
    from xfmr.evaluation.tasks import prepare_tasks

    return prepare_tasks


def task_manager(include_path: Path, names: Sequence[str]) -> Any:
    """lm-eval's TaskManager over `include_path`; lm-eval's own tasks (indexing them takes
    seconds, and their data is on the Hub) are added only when a name is none of these."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(include_path), include_defaults=False)
    if all(name in manager.all_tasks for name in names):
        return manager
    manager = TaskManager(include_path=str(include_path))
    unknown = [name for name in names if name not in manager.all_tasks]
    if unknown:
        raise UserError(
            f"tasks={','.join(unknown)}: no such task among xfmr's, tasks_dir's or lm-eval's"
        )
    return manager


def run_tasks(
    run: LoadedRun,
    names: Sequence[str],
    *,
    tasks_dir: str | Path | None = None,
    limit: int | float | None = None,
    batch_size: int = 16,
    num_fewshot: int | None = None,
) -> dict[str, float]:
    """Score `run` on the tasks `names` (limit: examples per task, or a fraction); writes
    RUN/lm_eval.json and adds the scores to RUN/results.json; returns the scores added."""
    require_lm_eval()
    import lm_eval

    from xfmr.evaluation.lm_model import XfmrLM

    lm = XfmrLM(run, batch_size=batch_size)
    with tempfile.TemporaryDirectory(prefix="xfmr-tasks-") as work_dir:
        prepared = preparer()(
            run,
            list(names),
            tasks_dir=Path(tasks_dir).expanduser() if tasks_dir else None,
            work_dir=Path(work_dir),
        )
        manager = task_manager(prepared.include_path, prepared.names)
        report = lm_eval.simple_evaluate(
            model=lm,
            tasks=list(prepared.names),
            task_manager=manager,
            limit=limit,
            num_fewshot=num_fewshot,
            log_samples=False,
        )
    run_dir = run.files.run_dir
    write_json(run_dir / LM_EVAL_FILE, json.loads(json.dumps(report, default=str)))
    metrics = task_metrics(report["results"], prepared.chance)
    add_to_results(run_dir, metrics)
    return metrics
