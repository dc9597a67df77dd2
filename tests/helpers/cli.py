"""The real CLI in a process of its own, as a person runs it."""

from __future__ import annotations

import os
import subprocess
import sys
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


def compare_cli(args: list, cwd: Path) -> Completed:
    """`xfmr-compare *args` (paths and other arguments as strings)."""
    return run_cli([str(a) for a in args], cwd, timeout=120, module="xfmr.cli.compare")


def compare_json(args: list, cwd: Path) -> dict:
    """`xfmr-compare *args --format json`, which must succeed, read back."""
    import json

    result = compare_cli([*args, "--format", "json"], cwd)
    assert result.returncode == 0, result.output
    return json.loads(result.stdout)
