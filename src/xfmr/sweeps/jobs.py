"""A sweep's jobs: each runs in a child process of its own, and what it left behind says how it
ended.

Hydra's basic launcher runs jobs in its own process and catches `Exception` only, so a job that
calls `sys.exit` (every config check does), is killed by the kernel (out of memory) or by
SIGKILL ends the whole sweep. Here a job is a process of its own (`xfmr.sweeps.processes`):
whatever happens to it, the parent records it and the sweep goes on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xfmr.files import write_json
from xfmr.run_dir.files import RESULTS_FILE
from xfmr.sweeps.gpus import GpuPool
from xfmr.sweeps.processes import run_in_child, stop_job_server
from xfmr.sweeps.search import is_finite

log = logging.getLogger("xfmr")

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_compose_lock = threading.Lock()  # Hydra's config loading is not made for threads
_composed: dict[tuple[int, tuple[str, ...], int], Any] = {}  # oldest first
_COMPOSED_KEPT = 64


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
    return _sweep_subdir(_job_config(config_loader, config, overrides, num))


def _job_config(
    config_loader: Any, config: Any, overrides: list[str], num: int, *, take: bool = False
) -> Any:
    """Job `num`'s config, composed once (a composition takes a good part of a second): the
    sweep asks for its run directory, then the launcher for the config it runs with, which
    takes it (`take`) to change it."""
    from omegaconf import open_dict

    key = (id(config), tuple(overrides), num)
    with _compose_lock:
        sweep_config = _composed.pop(key, None)
        if sweep_config is None:
            sweep_config = config_loader.load_sweep_config(config, list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = num
                sweep_config.hydra.job.num = num
        if not take:
            _composed[key] = sweep_config
            while len(_composed) > _COMPOSED_KEPT:
                _composed.pop(next(iter(_composed)))
    return sweep_config


def composed_job(config_loader: Any, config: Any, overrides: list[str], num: int) -> Any:
    """Job `num`'s config as the launcher will run it (composed once, kept for the launcher)."""
    return _job_config(config_loader, config, overrides, num)


def end_of_jobs() -> None:
    """The sweep is over: its configs go, and the fork server with them."""
    with _compose_lock:
        _composed.clear()
    stop_job_server()


def _sweep_subdir(sweep_config: Any) -> Path:
    from omegaconf import OmegaConf

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


def launch_job(
    hydra_context: Any,
    task_function: Any,
    config: Any,
    overrides: list[str],
    num: int,
    *,
    start_method: str = "forkserver",
    preload: tuple[str, ...] = (),
    gpus: GpuPool | None = None,
):
    """xfmr's launcher: job `num` in a child process, its output in its log, its GPUs (a group
    of `gpus`, held while it runs) in its CUDA_VISIBLE_DEVICES; a `JobReturn` that says how it
    ended (failed: its return value is a `JobFailed` with the one-line reason)."""
    from hydra.core.utils import JobReturn, JobStatus

    sweep_config = _job_config(hydra_context.config_loader, config, overrides, num, take=True)
    log_path = job_log_path(_sweep_subdir(sweep_config), sweep_config)
    log_once(sweep_config, log_path)
    with gpus.held() if gpus else nullcontext(None) as group:
        ok, value = run_in_child(
            hydra_context,
            task_function,
            sweep_config,
            log_path=log_path,
            start_method=start_method,
            preload=preload,
            environ=None if group is None else {"CUDA_VISIBLE_DEVICES": ",".join(group)},
        )
    ret = JobReturn(
        overrides=list(overrides), status=JobStatus.COMPLETED if ok else JobStatus.FAILED
    )
    ret.return_value = value if ok else JobFailed(value)
    return ret


def job_log_path(job_dir: Path, config: Any) -> Path:
    """A job's log, where all it printed goes: the file Hydra's job logging writes in its run
    directory (RUN_DIR/train.log)."""
    return job_dir / f"{config.hydra.job.name}.log"


def log_once(sweep_config: Any, log_path: Path) -> None:
    """The job's console output goes to `log_path`: a log handler that writes the same file
    (Hydra's `file`) would put every message there twice."""
    from omegaconf import open_dict, read_write

    with read_write(sweep_config.hydra), open_dict(sweep_config.hydra):
        sweep_config.hydra.runtime.output_dir = str(log_path.parent)  # as the job will set it
        logging_config = sweep_config.hydra.job_logging
        handlers = logging_config.get("handlers") or {}
        same = {
            name
            for name, handler in handlers.items()
            if handler.get("filename") and Path(str(handler.filename)) == log_path
        }
        root = logging_config.get("root") or {}
        if same and root.get("handlers"):
            root.handlers = [name for name in root.handlers if name not in same]
