"""The CLI in a process of its own, without paying its imports every time.

A command-line test wants what a person gets: a process of its own, its exit code, its output,
a run killed by a signal. Starting Python and importing torch, Lightning and Hydra costs 3-5 s
a process, most of a short test. Python's fork server imports them once, in a process started
fresh (no threads yet), and forks a child per command: each child is still a new process with
its own pid, exit code, signals, working directory and environment, and runs the module as
`python -m` would (`run_module`), or a benchmark script as `python SCRIPT` would (`run_script`).

What a fork cannot give, a real interpreter start does: `fresh=True`, or an environment that
only takes effect at start-up (a `sitecustomize` on PYTHONPATH, thread counts torch has read).
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

# What every entry point imports before it does anything: a child forked after these starts
# in milliseconds.
_PRELOAD = [
    "torch",
    "lightning",
    "hydra",
    "omegaconf",
    "tokenizers",
    "xfmr.cli.train",
    "xfmr.training.run",
    "xfmr.runs.inference",
]
# Read by torch or Python only when the interpreter starts: a child forked from the server
# would silently ignore them.
_START_UP_ONLY = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "PYTHONSTARTUP")

_context: multiprocessing.context.BaseContext | None = None


def can_fork(env: dict[str, str]) -> bool:
    """Whether a forked child would behave as a new interpreter started with `env`."""
    if sys.platform != "linux":
        return False
    for key in _START_UP_ONLY:
        if env.get(key) != os.environ.get(key):
            return False
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return not any(Path(p, name).exists() for p in extra for name in _SITE_HOOKS)


_SITE_HOOKS = ("sitecustomize.py", "usercustomize.py")


def _fork_server() -> multiprocessing.context.BaseContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


def run_module(
    module: str, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int, str, str]:
    """`python -m module *args` in `cwd` with `env` (the whole environment), stdin empty:
    (returncode, stdout, stderr), a negative code for a signal as subprocess gives."""
    return _run_forked(_child, module, args, cwd=cwd, env=env, timeout=timeout)


def run_script(
    script: Path, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int, str, str]:
    """`python SCRIPT *args` (a benchmark script) as `run_module` runs a module: the script's
    folder first on sys.path and its path as sys.argv[0], as the interpreter sets them."""
    return _run_forked(_script_child, str(script), args, cwd=cwd, env=env, timeout=timeout)


def _run_forked(
    child, target: str, args: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory(prefix="xfmr-cli-") as scratch:
        out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
        process = _fork_server().Process(
            target=child, args=(target, list(args), str(cwd), dict(env), str(out), str(err))
        )
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([target, *args], timeout)
        return process.exitcode, _read(out), _read(err)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _child(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str):
    """In the forked process: become `python -m module *args` started in `cwd` with `env`."""
    _become(cwd, env, out, err)
    sys.argv = [module, *args]
    # The server imported the entry point's module; `python -m` runs a fresh copy as __main__,
    # so drop the cached one (runpy would warn on stderr, and a CLI's stderr is tested).
    sys.modules.pop(module, None)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _script_child(script: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str):
    """In the forked process: become `python SCRIPT *args` started in `cwd` with `env`."""
    _become(cwd, env, out, err)
    sys.path.insert(0, str(Path(script).parent))
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def _become(cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """A new interpreter's start: stdin empty, stdout and stderr to files, `cwd`, `env`."""
    _redirect(0, os.devnull, os.O_RDONLY)
    _redirect(1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdout.reconfigure(line_buffering=True)  # as PYTHONUNBUFFERED: nothing lost to a kill
    sys.stderr.reconfigure(line_buffering=True)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # As PYTHONPATH would at start-up: its folders ahead of the installed packages.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)
