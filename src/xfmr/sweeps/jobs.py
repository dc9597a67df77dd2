"""A sweep's jobs: each runs in a child process of its own, and what it left behind says how it
ended.

Hydra's basic launcher runs jobs in its own process and catches `Exception` only, so a job that
calls `sys.exit` (every config check does), is killed by the kernel (out of memory) or by
SIGKILL ends the whole sweep. Here a job is a spawned process: whatever happens to it, the
parent records it and the sweep goes on.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xfmr.files import write_json
from xfmr.sweeps.search import is_finite

log = logging.getLogger("xfmr")

RESULTS_FILE = "results.json"
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_compose_lock = threading.Lock()  # Hydra's config loading is not made for threads


class JobFailed(Exception):
    """A job's one-line reason, carried in Hydra's `JobReturn` as its failed return value."""


@dataclass
class JobOutcome:
    """How one job ended, as `sweep.json` lists it."""

    num: int
    overrides: list[str]
    dir: str
    status: str
    value: float | None = None
    step: int | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}


def job_output_dir(config_loader: Any, config: Any, overrides: list[str], num: int) -> Path:
    """The run directory Hydra gives job `num`: `hydra.sweep.dir` / `hydra.sweep.subdir`."""
    from omegaconf import OmegaConf, open_dict

    with _compose_lock:
        sweep_config = config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    subdir = OmegaConf.select(sweep_config, "hydra.sweep.subdir")
    return Path(str(sweep_config.hydra.sweep.dir)) / str(subdir)


def read_results(job_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((job_dir / RESULTS_FILE).read_text())
    except (OSError, ValueError):
        return None


def outcome_of(
    num: int, overrides: list[str], job_dir: Path, metric: str, failure: str | None
) -> JobOutcome:
    """What the job's results.json says; a job that left none (or an unfinished one) failed,
    with the launcher's reason, and its results.json is written here so the run directory
    tells the same story as sweep.json."""
    results = read_results(job_dir) or {}
    status = results.get("status")
    outcome = JobOutcome(num, list(overrides), str(job_dir), status or "failed")
    outcome.step = results.get("step")
    value = (results.get("metrics") or {}).get(metric)
    outcome.value = float(value) if is_finite(value) else None
    if status in ("completed", "pruned") and failure is None:
        if status == "completed" and outcome.value is None:
            outcome.status, outcome.reason = "failed", f"{metric} is missing or not finite"
        return outcome
    if status == "failed":
        outcome.reason = results.get("reason") or failure
        return outcome
    if status == "interrupted":  # Ctrl-C or SIGTERM: it saved a checkpoint and can resume
        outcome.reason = "interrupted; it resumes from its last checkpoint"
        return outcome
    outcome.status = "failed"
    outcome.reason = failure or f"the job ended without writing {RESULTS_FILE}"
    write_failure(job_dir, overrides, outcome.reason, results)
    return outcome


def write_failure(
    job_dir: Path, overrides: list[str], reason: str, results: dict[str, Any]
) -> None:
    """A results.json for a job that could not write its own (killed, exited early)."""
    record = {**results, "status": "failed", "reason": reason, "overrides": list(overrides)}
    write_json(job_dir / RESULTS_FILE, record)


def divide_threads(workers: int) -> None:
    """The machine's threads divided between `workers` jobs running at once, through the
    environment every job's process inherits (a person's own OMP_NUM_THREADS wins)."""
    if workers <= 1 or os.environ.get("OMP_NUM_THREADS"):
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ.update(dict.fromkeys(_THREAD_VARS, threads))


def launch_job(hydra_context: Any, task_function: Any, config: Any, overrides: list[str], num: int):
    """xfmr's launcher: job `num` in a child process; a `JobReturn` that says how it ended
    (failed: its return value is a `JobFailed` with the one-line reason)."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import open_dict

    with _compose_lock:
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = num
        sweep_config.hydra.job.num = num
    ok, value = run_in_child(hydra_context, task_function, sweep_config)
    return JobReturn(
        overrides=list(overrides),
        status=JobStatus.COMPLETED if ok else JobStatus.FAILED,
        _return_value=value if ok else JobFailed(value),
    )


def run_in_child(hydra_context: Any, task_function: Any, sweep_config: Any) -> tuple[bool, Any]:
    """Run one Hydra job in a spawned process (never forked: torch's threads do not survive a
    fork). Returns (ok, the task's return value or the one-line reason it failed)."""
    import cloudpickle
    from hydra.core.singleton import Singleton

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    # cloudpickle, as Hydra's joblib and submitit launchers do: Hydra's state holds OmegaConf's
    # resolvers, which are closures that plain pickle refuses.
    job = cloudpickle.dumps((hydra_context, task_function, sweep_config, Singleton.get_state()))
    process = context.Process(target=_child_main, args=(sender, job))
    process.start()
    sender.close()
    try:
        message = receiver.recv()
    except EOFError:  # the child died before it could say anything
        message = None
    process.join()
    if message is None:
        return False, _exit_reason(process.exitcode)
    return message


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory, or kill -9)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"the job's process exited with code {code}"


def _child_main(sender: Any, job: bytes) -> None:
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobStatus, run_job, setup_globals

    hydra_context, task_function, sweep_config, singleton_state = cloudpickle.loads(job)
    Singleton.set_state(singleton_state)
    setup_globals()
    sys.stderr = tail = _LastLine(sys.stderr)
    code = 0
    try:
        ret = run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
        if ret.status == JobStatus.COMPLETED:
            message = (True, ret._return_value)
        else:
            error = ret._return_value
            traceback.print_exception(error)
            message = (False, f"{type(error).__name__}: {error}".splitlines()[0])
    except SystemExit as e:  # a config check's one-line message, or a person's sys.exit
        code = e.code if isinstance(e.code, int) else 1
        reason = (tail.error or tail.last).removeprefix("xfmr-train: error: ")
        message = (False, reason or f"the job called sys.exit({e.code!r})")
    except BaseException as e:  # noqa: BLE001 - whatever it was, the parent records it
        traceback.print_exc()
        code = 1
        message = (False, f"{type(e).__name__}: {e}".splitlines()[0])
    sender.send(message)
    sender.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no waiting on threads a library left behind (wandb, loaders)


class _LastLine:
    """Passes writes through to stderr and keeps the last `xfmr-train: error:` line (the
    message a job printed before it exited; a config error may add detail lines after it) and
    the last non-empty line."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.last = ""
        self.error = ""

    def write(self, text: str) -> int:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            self.last = lines[-1]
            self.error = next((s for s in reversed(lines) if ": error: " in s), self.error)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
