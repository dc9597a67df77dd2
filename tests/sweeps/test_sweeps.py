"""Sweeps end to end with the real CLI: a grid whose jobs fail in every way still runs the rest;
a search prunes, resumes to exactly n_trials, and runs trials two at a time with no barrier."""

from __future__ import annotations

import json
import os
from importlib.metadata import version
from pathlib import Path

import optuna
import pytest

from helpers import helpers_env
from helpers.cli import run_cli
from helpers.runs import CORPUS, TINY, read_results

pytestmark = pytest.mark.slow

QUIET = [*TINY, "logger=none", "callbacks.text_sample=null"]


def _text(corpus: Path) -> list[str]:
    return ["data=text", f"data.path={corpus}"]


def _sweep_summary(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.json").read_text())


def _scenarios(root: Path) -> Path:
    """Config files for `+scenario=...`: each job of one grid fails in its own way."""
    conf = root / "my_conf" / "scenario"
    conf.mkdir(parents=True)
    files = {
        "ok": "",
        "raise": "callbacks:\n  fault:\n    _target_: helpers.sweep_faults.Raise\n",
        "kill": "callbacks:\n  fault:\n    _target_: helpers.sweep_faults.Kill\n",
        "exit": "model:\n  d_model: 63\n",  # a config check refuses it (sys.exit)
        "infinite": "optim:\n  lr: 1.0e+30\n",  # the loss stops being finite
    }
    for name, body in files.items():
        (conf / f"{name}.yaml").write_text(f"# @package _global_\n{body}")
    return root / "my_conf"


def test_grid_records_every_failure_and_runs_every_other_job(tmp_path: Path, corpus: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "--config-dir",
            str(_scenarios(tmp_path)),
            "-m",
            *_text(corpus),
            *QUIET,
            f"hydra.sweep.dir={sweep}",
            "+scenario=raise,exit,kill,infinite,ok",
        ],
        tmp_path,
        env=helpers_env(),  # the callbacks' module, ahead of the caller's PYTHONPATH
    )
    assert result.returncode == 1, result.output  # failures make the sweep exit non-zero
    summary = _sweep_summary(sweep)
    assert summary["counts"] == {"completed": 1, "failed": 4, "pruned": 0, "interrupted": 0}
    jobs = {job["overrides"][-1].split("=")[1]: job for job in summary["jobs"]}
    assert "RuntimeError: injected failure" in jobs["raise"]["reason"]
    assert "d_model=63 is not divisible" in jobs["exit"]["reason"]
    assert "killed by SIGKILL" in jobs["kill"]["reason"]
    assert "the loss is" in jobs["infinite"]["reason"] and "at step" in jobs["infinite"]["reason"]
    assert jobs["ok"]["status"] == "completed" and summary["best"]["num"] == jobs["ok"]["num"]
    for name in ("raise", "exit", "kill", "infinite"):  # each run directory tells the same story
        results = read_results(Path(jobs[name]["dir"]))
        assert results["status"] == "failed" and results["reason"] == jobs[name]["reason"]
    assert read_results(Path(jobs["ok"]["dir"]))["status"] == "completed"


def test_non_finite_loss_stops_a_run_with_the_step_and_keeps_no_bad_checkpoint(
    tmp_path: Path, corpus: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [*_text(corpus), *QUIET, f"hydra.run.dir={run_dir}", "optim.lr=1e30"], tmp_path
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "the loss is" in errors[0] and "optim.lr" in errors[0]
    results = read_results(run_dir)
    assert results["status"] == "failed" and "at step" in results["reason"]
    json.loads((run_dir / "results.json").read_text(), parse_constant=pytest.fail)  # strict JSON
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()


SEARCH = [
    "hydra.sweeper.sampler=random",
    "++hydra.sweeper.sampler_args.seed=0",  # draws 1e-6, 0.01, 1e-6, 1e-6
    "hydra.sweeper.pruner=median",
    "++hydra.sweeper.pruner_args.n_startup_trials=1",
    "++hydra.sweeper.pruner_args.n_warmup_steps=4",
    "optim.lr=choice(0.01,0.000001)",  # a sweep on the command line joins the search space
    "trainer.max_steps=10",
    "trainer.val_check_interval=2",
]


def _trials(sweep: Path) -> list:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(sweep / "optuna.journal")))
    return optuna.load_study(study_name=sweep.name, storage=storage).trials


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    """A 4-trial search with median pruning (module-scoped: the resume test continues it)."""
    root = tmp_path_factory.mktemp("search")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS)
    sweep = root / "lr_search"
    args = ["-m", *_text(corpus), *QUIET, *SEARCH, f"hydra.sweep.dir={sweep}"]
    result = run_cli([*args, "hydra.sweeper.n_trials=4"], root)
    assert result.returncode == 0, result.output
    return root, sweep, args


def test_search_prunes_unpromising_trials_after_warm_up(searched) -> None:
    _, sweep, _ = searched
    summary = _sweep_summary(sweep)
    assert summary["kind"] == "search" and len(summary["jobs"]) == 4
    assert summary["versions"] == {"xfmr": version("xfmr"), "optuna": optuna.__version__}
    pruned = [job for job in summary["jobs"] if job["status"] == "pruned"]
    assert pruned, summary["counts"]
    for job in pruned:
        results = read_results(Path(job["dir"]))  # the run directory stays, and says so
        assert results["status"] == "pruned" and results["step"] == job["step"]
        assert results["step"] >= 4  # never before the warm-up steps
        assert results["step"] < 10 and (Path(job["dir"]) / "checkpoints" / "last.ckpt").is_file()
    trials = _trials(sweep)
    assert sorted(t.state.name for t in trials) == sorted(
        {"completed": "COMPLETE", "pruned": "PRUNED"}[j["status"]] for j in summary["jobs"]
    )
    for trial in trials:  # every validation reported the metric to its trial
        history = read_results(Path(trial.user_attrs["dir"]))["history"]
        assert trial.intermediate_values == {
            h["step"]: pytest.approx(h["val/loss"]) for h in history
        }


def test_the_same_command_resumes_to_n_trials_without_repeating(searched) -> None:
    root, sweep, args = searched
    before = {p: p.read_bytes() for p in sweep.glob("*/results.json")}
    result = run_cli([*args, "hydra.sweeper.n_trials=6"], root)
    assert result.returncode == 0, result.output
    assert "4 trials finished, 2 to run" in result.output
    trials = _trials(sweep)
    assert [t.number for t in trials] == list(range(6))
    dirs = [t.user_attrs["dir"] for t in trials]
    assert len(set(dirs)) == 6 and all(Path(d).is_dir() for d in dirs)
    assert {p: p.read_bytes() for p in before} == before  # no finished trial ran again
    assert len(_sweep_summary(sweep)["jobs"]) == 6


def test_two_workers_take_the_next_trial_without_waiting_for_the_slow_one(
    tmp_path: Path, corpus: Path
) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "-m",
            *_text(corpus),
            *QUIET,
            f"hydra.sweep.dir={sweep}",
            "hydra.sweeper.sampler=grid",
            "++hydra.sweeper.sampler_args.seed=1",
            "hydra.sweeper.pruner=none",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.workers=2",
            "trainer.max_steps=choice(600,4,6)",
            "trainer.val_check_interval=1000",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    spans = {}
    for job in _sweep_summary(sweep)["jobs"]:
        run = Path(job["dir"])
        steps = read_results(run)["step"]
        spans[steps] = (
            (run / ".hydra" / "config.yaml").stat().st_mtime,
            (run / "results.json").stat().st_mtime,
        )
    assert sorted(spans) == [4, 6, 600]
    slow_start, slow_end = spans[600]
    # The grid's order with seed 1 is 600, 6, 4: the slow trial holds one worker while the
    # other runs both fast ones, the second starting as soon as the first has ended.
    assert slow_start < spans[6][0] + 2
    assert spans[6][1] <= spans[4][0] and spans[4][1] < slow_end
    threads = {read_results(Path(j["dir"]))["threads"] for j in _sweep_summary(sweep)["jobs"]}
    assert threads == {max(1, os.cpu_count() // 2)}  # the machine's threads, divided


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_optuna_dashboard_lists_the_sweeps_study(searched) -> None:
    import subprocess
    import sys
    import time
    import urllib.request

    _, sweep, _ = searched
    port = _free_port()
    dashboard = Path(sys.executable).parent / "optuna-dashboard"
    server = subprocess.Popen(
        [str(dashboard), str(sweep / "optuna.journal"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline, body = time.monotonic() + 60, None
        while body is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.5)
        assert body is not None, "optuna-dashboard did not answer within 60 s"
        [study] = body["study_summaries"]
        assert study["study_name"] == sweep.name and study["directions"] == ["minimize"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_submitit_local_runs_a_sweep_two_jobs_at_a_time(tmp_path: Path, corpus: Path) -> None:
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=5",
            "hydra.sweeper.workers=2",
            *_text(corpus),
            *QUIET,
            f"hydra.sweep.dir={sweep}",
            "seed=1,2",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    summary = _sweep_summary(sweep)
    assert summary["counts"]["completed"] == 2
    assert sorted(read_results(Path(j["dir"]))["overrides"][-1] for j in summary["jobs"]) == [
        "seed=1",
        "seed=2",
    ]
    assert list((sweep / ".submitit").iterdir())  # submitit ran them, and kept its logs


def test_a_killed_search_resumes_and_runs_its_interrupted_trial_again(
    tmp_path: Path, corpus: Path
) -> None:
    """kill -9 the whole sweep while trial 0 runs; the same command marks it failed
    (interrupted), queues its values again under a new trial number and finishes n_trials."""
    import signal
    import subprocess
    import sys
    import time

    sweep = tmp_path / "sweep"
    args = [
        "-m",
        *_text(corpus),
        *QUIET,
        f"hydra.sweep.dir={sweep}",
        "hydra.sweeper.sampler=random",
        "hydra.sweeper.pruner=none",
        "hydra.sweeper.n_trials=2",
        "optim.lr=choice(0.01,0.003)",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / ".cache"), "OMP_NUM_THREADS": "1"}
    sweeper = subprocess.Popen(
        [sys.executable, "-m", "xfmr.cli.train", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    # Hydra writes the job's .hydra/ files before the job imports torch (seconds): trial 0 is
    # then running in the study and nowhere near its end.
    started = sweep / "0" / ".hydra" / "config.yaml"
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists() and not (sweep / "0" / "results.json").exists()
    os.killpg(sweeper.pid, signal.SIGKILL)  # the sweeper and its job, as an OOM or scancel would
    sweeper.wait()
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.output
    trials = _trials(sweep)
    interrupted = [t for t in trials if t.user_attrs.get("interrupted")]
    assert [t.number for t in interrupted] == [0]
    retried = [t for t in trials if t.user_attrs.get("retry_of") == 0]
    assert len(retried) == 1 and retried[0].params == interrupted[0].params
    finished = [t for t in trials if not t.user_attrs.get("interrupted")]
    assert len(finished) == 2 and {t.state.name for t in finished} == {"COMPLETE"}
    assert len({t.user_attrs["dir"] for t in trials}) == len(trials)


def test_under_ddp_rank_zero_asks_the_study_and_every_rank_stops(
    tmp_path: Path, corpus: Path
) -> None:
    """Trial 0 (lr 0.01) completes; trial 1 (lr 1e-6) is pruned at the first step it may be.
    Both ranks stop there: rank 1 never talks to the study, yet it ends cleanly with rank 0
    (a rank that went on would hang in its next all-reduce, and the run would fail)."""
    sweep = tmp_path / "sweep"
    result = run_cli(
        [
            "-m",
            *_text(corpus),
            *QUIET,
            "trainer=ddp",
            "trainer.accelerator=cpu",
            "trainer.devices=2",
            f"hydra.sweep.dir={sweep}",
            "hydra.sweeper.sampler=random",
            "++hydra.sweeper.sampler_args.seed=0",  # draws 0.01, then 1e-6
            "hydra.sweeper.n_trials=2",
            "++hydra.sweeper.pruner_args.n_startup_trials=1",
            "++hydra.sweeper.pruner_args.n_warmup_steps=4",
            "optim.lr=choice(0.000001,0.01)",
            "trainer.max_steps=12",
            "trainer.val_check_interval=2",
        ],
        tmp_path,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.output
    jobs = _sweep_summary(sweep)["jobs"]
    assert [j["status"] for j in jobs] == ["completed", "pruned"], jobs
    pruned = read_results(Path(jobs[1]["dir"]))
    assert pruned["world_size"] == 2 and pruned["status"] == "pruned" and pruned["step"] == 4
    assert (Path(jobs[1]["dir"]) / "ddp" / "rank1.log").is_file()
