"""Running a sweep's jobs through a Hydra launcher, `workers` at a time with no batch barrier:
a worker takes the next job as soon as its own has ended.

A grid runs every combination of the command line's sweeps; a search asks Optuna for each
trial's values and tells it how the trial ended. Both record every job's outcome and go on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.sweeps.jobs import (
    JobOutcome,
    job_log_path,
    job_output_dir,
    outcome_of,
    read_results,
)
from xfmr.sweeps.summary import varying_keys

log = logging.getLogger("xfmr")


class JobRunner:
    """Launches one job at a time per calling thread and reads how it ended; a line on the
    console when it starts and one when it ends (the job's own output is in its log)."""

    def __init__(self, launcher: Any, config_loader: Any, config: Any, metric: str) -> None:
        self.launcher = launcher
        self.config_loader = config_loader
        self.config = config
        self.metric = metric
        # The override keys that tell one job from another, shown in its start line (None: all).
        self.shown_keys: set[str] | None = None

    def job_dir(self, num: int, overrides: list[str]) -> Path:
        return job_output_dir(self.config_loader, self.config, overrides, num)

    def run(self, num: int, overrides: list[str]) -> JobOutcome:
        from hydra.core.utils import JobStatus

        job_dir = self.job_dir(num, overrides)
        shown = [o for o in overrides if self.shown_keys is None or _key(o) in self.shown_keys]
        log.info("job %d started: %s", num, " ".join(shown))
        started = time.monotonic()
        failure = None
        try:
            [ret] = self.launcher.launch([list(overrides)], initial_job_idx=num)
            if ret.status == JobStatus.FAILED:
                failure = _one_line(_raised(ret))
        except Exception as e:  # a launcher that raises for its job (submitit): that job failed
            failure = _one_line(e)
        outcome = outcome_of(num, overrides, job_dir, self.metric, failure)
        log.info("%s", self.ended_line(outcome, time.monotonic() - started))
        return outcome

    def ended_line(self, outcome: JobOutcome, seconds: float) -> str:
        """`job 3 completed  val/loss=2.31  12.4 s  log: RUN_DIR/train.log`, with the one-line
        reason of a job that did not complete."""
        parts = [f"job {outcome.num} {outcome.status}"]
        if outcome.value is not None:
            parts.append(f"{self.metric}={outcome.value:.6g}")
        if outcome.reason:
            parts.append(f"({outcome.reason})")
        parts.append(f"{seconds:.1f} s")
        log_path = job_log_path(Path(outcome.dir), self.config)
        if log_path.is_file():
            parts.append(f"log: {log_path}")
        return "  ".join(parts)


def _key(override: str) -> str:
    return override.partition("=")[0]


def _one_line(error: Any) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[-1] if "Traceback" in text else text.splitlines()[0]


def run_grid(runner: JobRunner, jobs: list[list[str]], workers: int) -> list[JobOutcome]:
    """Every job of the grid; a job whose run directory already ended (completed or pruned)
    with the same overrides is not run again, so the same command resumes a killed sweep."""
    outcomes: list[JobOutcome] = []
    pending: list[tuple[int, list[str]]] = []
    runner.shown_keys = varying_keys([{"overrides": o} for o in jobs])
    for num, overrides in enumerate(jobs):
        job_dir = runner.job_dir(num, overrides)
        results = read_results(job_dir)
        if results is None:
            pending.append((num, overrides))
            continue
        if list(results.get("overrides") or []) != list(overrides):
            raise UserError(
                f"hydra.sweep.dir: {job_dir} holds a job with other overrides "
                f"({' '.join(results.get('overrides') or [])}); give a new hydra.sweep.dir"
            )
        if results.get("status") in ("completed", "pruned"):
            log.info("job %d already %s: %s", num, results["status"], job_dir)
            outcomes.append(outcome_of(num, overrides, job_dir, runner.metric, None))
        else:
            pending.append((num, overrides))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        outcomes += list(pool.map(lambda job: runner.run(*job), pending))
    return outcomes


def _raised(ret: Any) -> BaseException:
    """What a failed job raised: Hydra's `JobReturn.return_value` raises it again, after a line
    of its own on stderr, which the job's log already holds."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _ = ret.return_value  # raises what the job raised
    except BaseException as error:  # noqa: BLE001 - the job's own exception, whatever it was
        return error
    return RuntimeError("the job failed")
