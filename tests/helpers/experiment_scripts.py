"""Running a benchmarks/ script as its test does: an experiment_*.py script in quick mode on a
corpus the test writes, with runs, page and caches under the test's own directory, in a process
of its own; or a script's functions called in the test's process, the commands it starts
still each in a process of its own."""

from __future__ import annotations

import importlib
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from helpers import ROOT
from helpers.cli_processes import can_fork, run_module, run_script
from helpers.docs import blocks_of, marker_problem


def write_corpus(path: Path) -> Path:
    """About 20,000 characters of made-up words: letters within a word say much about the next,
    so a few steps learn something, and the letters' frequencies alone say little."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(150)]
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(500)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_quick(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`python benchmarks/SCRIPT --quick` over the test's corpus; the page in tmp_path/page,
    every code block of which must be fenced and marked as the docs' are
    (tests/docs/test_doc_blocks.py)."""
    corpus = tmp_path / "words.txt"
    if not corpus.exists():
        write_corpus(corpus)
    args = [
        "--quick",
        f"--data={corpus}",
        f"--runs={tmp_path / 'runs'}",
        f"--page={tmp_path / 'page'}",
    ]
    result = run_benchmark(script, args, {"XFMR_CACHE_DIR": str(tmp_path / "cache")})
    for page in sorted((tmp_path / "page").glob("*.md")) if result.returncode == 0 else []:
        blocks = blocks_of(page.read_text(), page)
        problems = [f"{b.where}: {p}" for b in blocks if (p := marker_problem(b))]
        assert not problems, "\n".join(problems)
    return result


def run_benchmark(
    script: str, args: list[str], env: dict[str, str] | None = None, *, timeout: float = 600
) -> subprocess.CompletedProcess:
    """`python benchmarks/SCRIPT *args` (`run_python_script`)."""
    return run_python_script(ROOT / "benchmarks" / script, args, env, timeout=timeout)


def run_python_script(
    path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    cwd: Path | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    """`python PATH *args` in a process of its own, with this process's environment and `env`:
    forked from the tests' server that has torch, Lightning and xfmr imported
    (helpers/cli_processes.py) where a fork behaves as a new interpreter would, else a new one."""
    env = {**os.environ, **(env or {})}
    cwd = cwd or Path.cwd()
    if can_fork(env):
        found = run_script(path, args, cwd=cwd, env=env, timeout=timeout)
        return subprocess.CompletedProcess([str(path), *args], *found)
    command = [sys.executable, str(path), *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
    )


def script_in_process(name: str, monkeypatch: Any) -> ModuleType:
    """A benchmarks/ script (`packing`) imported for a test that calls its `main` in the test's
    process, with every command the script runs through `common.xfmr_runs.run_quietly`
    (xfmr-train, nanoGPT's train.py) run by `run_quietly` below for the test's duration."""
    script = benchmark_script(name)
    for module in ("common.xfmr_runs", "common.nanogpt"):
        monkeypatch.setattr(benchmark_script(module), "run_quietly", run_quietly)
    # Lightning's seed_everything, which a script may call, writes these: as they were after.
    for key in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.setenv(key, os.environ.get(key, ""))  # recorded: put back after the test
        if not os.environ[key]:
            monkeypatch.delenv(key)  # absent during the test, as it was
    return script


def run_quietly(command: list[str], **kwargs: Any) -> str:
    """benchmarks/common/xfmr_runs.py's `run_quietly`, for a test that calls a script's `main`
    in its own process and patches this in: the same command, working directory and
    environment, each in a process of its own; `python -m MODULE` and `python SCRIPT` forked
    from the tests' server where a fork behaves as a new interpreter would, any other command
    started as the script starts it. Its output (stdout, then stderr); a failure fails the test
    with its tail."""
    cwd, env = Path(kwargs.pop("cwd", None) or Path.cwd()), kwargs.pop("env", None) or os.environ
    assert not kwargs, f"run_quietly: {sorted(kwargs)} not handled here"
    forked = command[0] == sys.executable and len(command) > 2 and can_fork(env)
    if forked and command[1] == "-m":
        code, out, err = run_module(command[2], command[3:], cwd=cwd, env=env, timeout=600)
    elif forked and command[1].endswith(".py"):
        code, out, err = run_script(cwd / command[1], command[2:], cwd=cwd, env=env, timeout=600)
    else:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 0, f"{shlex.join(command)}\nfailed ({code}); it printed:\n{(out + err)[-4000:]}"
    return out + err


def tables(page: str, first_header: str) -> list[list[list[str]]]:
    """The rows of each of the page's markdown tables whose first column is `first_header`."""
    found = re.findall(rf"^\| {re.escape(first_header)} \|.*\n\|(?:---\|)+\n((?:\|.*\n)+)",
                       page, re.MULTILINE)  # fmt: skip
    assert found, f"no table headed {first_header!r} in:\n{page}"
    return [[[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in rows.splitlines()] for rows in found]  # fmt: skip


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def benchmark_script(name: str):
    """A script of benchmarks/ (`experiment_positions`) imported as a module, for a test that
    calls its functions; benchmarks/ is on sys.path only while it imports."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
