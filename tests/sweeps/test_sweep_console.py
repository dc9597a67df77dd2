"""A sweep's console reads like a sweep: a line as each job starts and one as it ends, while
all a job printed goes to its own log; each job is a process of its own, forked from a fork
server (or spawned, with hydra.launcher.start_method=spawn). The jobs are `sweep_app.py`'s,
which train nothing, so these tests time the sweep machinery alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import helpers_env
from helpers.cli import run_cli


def _sweep(tmp_path: Path, *overrides: str, fresh: bool = False):
    from helpers.sweep_app import APP_CONFIG

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "app.yaml").write_text(APP_CONFIG)
    sweep = tmp_path / "sweep"
    args = ["--config-dir", str(conf), "--config-name", "app", "-m", f"hydra.sweep.dir={sweep}"]
    result = run_cli(
        [*args, *overrides], tmp_path, module="helpers.sweep_app", env=helpers_env(), fresh=fresh
    )
    jobs = json.loads((sweep / "sweep.json").read_text())["jobs"]
    return result, {job["overrides"][-1]: job for job in jobs}


def _results(job: dict) -> dict:
    return json.loads((Path(job["dir"]) / "results.json").read_text())


def test_the_console_has_a_line_per_job_start_and_end_and_each_log_what_its_job_printed(
    tmp_path: Path,
) -> None:
    result, jobs = _sweep(tmp_path, "x=1,2,0", "hydra.sweeper.max_failure_rate=0.5")
    assert result.returncode == 0, result.output
    console = result.output
    for num, (name, job) in enumerate(jobs.items()):
        assert len(re.findall(rf"job {num} started: {name}$", console, re.MULTILINE)) == 1
        [ended] = re.findall(rf"job {num} (?:completed|failed)  .*$", console, re.MULTILINE)
        log_path = Path(job["dir"]) / "sweep_app.log"
        assert ended.endswith(f"s  log: {log_path}"), ended
        log = log_path.read_text()
        x = name.split("=")[1]
        for line in (f"stdout of job x={x}", f"stderr of job x={x}", f"log record of job x={x}"):
            assert log.count(line) == 1, log  # once: no second handler writes the same file
    assert "score=1  " in console and "score=2  " in console
    assert "job 2 failed  (RuntimeError: x=0 is refused)" in console  # the reason, in one line
    assert "Traceback" in (Path(jobs["x=0"]["dir"]) / "sweep_app.log").read_text()
    for printed in ("stdout of job", "stderr of job", "log record of job", "Traceback"):
        assert printed not in console, console


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_each_job_is_a_process_of_its_own_forked_by_the_fork_server(tmp_path: Path) -> None:
    # fresh: the sweep started as `python -m`, so that its own command line names it.
    result, jobs = _sweep(tmp_path, "x=1,2,3", fresh=True)
    assert result.returncode == 0, result.output
    pids = {_results(job)["pid"] for job in jobs.values()}
    assert len(pids) == 3
    parents = {_results(job)["parent"] for job in jobs.values()}
    [parent] = parents  # one fork server, not the sweep itself, started all three
    assert "multiprocessing.forkserver" in parent and "sweep_app" not in parent, parent


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_start_method_spawn_starts_each_job_from_the_sweep_itself(tmp_path: Path) -> None:
    result, jobs = _sweep(tmp_path, "x=1,2", "hydra.launcher.start_method=spawn", fresh=True)
    assert result.returncode == 0, result.output
    assert len({_results(job)["pid"] for job in jobs.values()}) == 2
    for job in jobs.values():
        assert "sweep_app" in _results(job)["parent"]
    assert "stdout of job" not in result.output
