"""The real CLI in a process of its own, as a person runs it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from helpers.cli_processes import can_fork, run_module


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(
    args: list[str],
    cwd: Path,
    *,
    timeout: float = 300,
    module: str = "xfmr.cli.train",
    env: dict[str, str] | None = None,
    fresh: bool = False,
) -> Completed:
    """`python -m module *args` in a process of its own: forked from a server that has the
    heavy imports done (tests/helpers/cli_processes.py), or a new interpreter with `fresh=True`
    or an environment that only a start-up reads."""
    env = {
        **os.environ,
        "XFMR_CACHE_DIR": str(cwd / ".cache"),
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    env.pop("WANDB_API_KEY", None)
    if not fresh and can_fork(env):
        return Completed(*run_module(module, args, cwd=cwd, env=env, timeout=timeout))
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@contextlib.contextmanager
def started(
    command: list[str], cwd: Path, env: dict[str, str], *, grace: float = 10
) -> Iterator[subprocess.Popen]:
    """`command` running in a process group of its own, its stdout and stderr together as text,
    for a test that signals it or waits on it. Whatever of it still runs when the test is done
    (or fails) is stopped: SIGTERM to the group, then SIGKILL after `grace` seconds."""
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def compare_cli(args: list, cwd: Path) -> Completed:
    """`xfmr-compare *args` (paths and other arguments as strings)."""
    return run_cli([str(a) for a in args], cwd, timeout=120, module="xfmr.cli.compare")


def compare_json(args: list, cwd: Path) -> dict:
    """`xfmr-compare *args --format json`, which must succeed, read back."""
    import json

    result = compare_cli([*args, "--format", "json"], cwd)
    assert result.returncode == 0, result.output
    return json.loads(result.stdout)
