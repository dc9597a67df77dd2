"""A sweep job's process of its own: started from a fork server that imported torch and
Lightning once, its output written to its run directory, and how it ended told to the parent.

A spawned process starts a fresh interpreter and imports torch and Lightning again: seconds per
job. Python's fork server is itself started by exec (a fresh process, with none of the sweep's
threads), imports the heavy modules once, and forks a process per job, so a job still has its
own pid, exit code and memory, and whatever kills it kills only it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

START_METHODS = ("forkserver", "spawn")


def run_in_child(
    hydra_context: Any,
    task_function: Any,
    sweep_config: Any,
    *,
    log_path: Path,
    start_method: str = "forkserver",
    preload: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
) -> tuple[bool, Any]:
    """Run one Hydra job in a process of its own, its stdout and stderr in `log_path`, with the
    sweep's environment and `environ` over it (the job's GPUs). Returns (ok, the task's
    return value or the one-line reason it failed)."""
    import cloudpickle
    from hydra.core.singleton import Singleton

    context = job_context(start_method, preload)
    receiver, sender = context.Pipe(duplex=False)
    # cloudpickle, as Hydra's joblib and submitit launchers do: Hydra's state holds OmegaConf's
    # resolvers, which are closures that plain pickle refuses. The environment goes along: a
    # forked job would otherwise see the fork server's, as it was when the server started.
    job = cloudpickle.dumps(
        (
            hydra_context,
            task_function,
            sweep_config,
            Singleton.get_state(),
            {**os.environ, **(environ or {})},
            str(log_path),
        )
    )
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


def job_context(start_method: str, preload: tuple[str, ...]) -> Any:
    """The multiprocessing context jobs start from. Never plain fork: the sweep's own process
    runs worker threads, and torch's thread pools do not survive a fork."""
    if start_method not in START_METHODS:
        raise ValueError(f"start method {start_method!r}; valid: {', '.join(START_METHODS)}")
    if start_method == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        # Read when the server starts (the first job of the process); an import that fails
        # there is skipped, and the job imports it itself. After these imports the server runs
        # no Python thread and torch has not started its pools (it does no work there); the
        # only other threads are OpenBLAS's (numpy, scipy), which OpenBLAS stops across a fork
        # (pthread_atfork): a job starts with one thread.
        context.set_forkserver_preload(list(preload))
        return context
    return multiprocessing.get_context("spawn")  # no fork server (Windows): a fresh interpreter


def stop_job_server() -> None:
    """Stop the fork server, if one was started: the sweep is over. (It would also go when
    this process ends; a process that runs sweeps one after another starts a fresh one with
    each.)"""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # the stdlib's own shutdown
    if stop is not None:
        stop()


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        hint = " (out of memory, or kill -9)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"the job's process exited with code {code}"


def _child_main(sender: Any, job: bytes) -> None:
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    hydra_context, task_function, sweep_config, singleton_state, environ, log_path = (
        cloudpickle.loads(job)
    )
    _take_environment(environ)
    _output_to(Path(log_path))
    Singleton.set_state(singleton_state)
    setup_globals()
    sys.stderr = tail = _LastLine(sys.stderr)
    code, message = _run_job(hydra_context, task_function, sweep_config, tail)
    sender.send(message)
    sender.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no waiting on threads a library left behind (wandb, loaders)


def _run_job(hydra_context: Any, task_function: Any, sweep_config: Any, tail: _LastLine):
    """(exit code, (ok, return value or one-line reason)) of the Hydra job."""
    from hydra.core.utils import run_job

    try:
        ret = run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except SystemExit as e:  # a config check's one-line message, or a person's sys.exit
        reason = (tail.error or tail.last).removeprefix("xfmr-train: error: ")
        code = e.code if isinstance(e.code, int) else 1
        return code, (False, reason or f"the job called sys.exit({e.code!r})")
    except BaseException as e:  # noqa: BLE001 - whatever it was, the parent records it
        traceback.print_exc()
        return 1, (False, f"{type(e).__name__}: {e}".splitlines()[0])
    try:
        return 0, (True, ret.return_value)
    except Exception as error:  # the job's own, which Hydra raises again for a failed job
        traceback.print_exception(error)
        return 0, (False, f"{type(error).__name__}: {error}".splitlines()[0])


def _take_environment(environ: dict[str, str]) -> None:
    """The sweep's environment as it was at the job's launch (the threads divided between
    workers among it), and torch's thread pool sized by it: torch, imported in the fork server,
    read the server's."""
    os.environ.clear()
    os.environ.update(environ)
    threads = environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))


def _output_to(log_path: Path) -> None:
    """Everything the job writes to stdout and stderr (the config tree, Lightning's messages,
    a C library's warnings, a traceback) goes to its log, not the sweep's console."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # in the order it was written, stderr beside


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
