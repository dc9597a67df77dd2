"""Stores that a sweep's jobs on several hosts share: SQLite is refused for them, naming the key
to set; Optuna's journal file and MLflow's file store, which are safe there, lose nothing when
four processes write at once with `flock` refused (as Lustre mounted without flock does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xfmr.errors import UserError

# Run first in each writer: a filesystem where flock and lockf fail, so a store that needs them
# fails here too.
NO_FLOCK = """
import errno, fcntl

def refused(*args, **kwargs):
    raise OSError(errno.ENOLCK, "No locks available")

fcntl.flock = fcntl.lockf = refused
"""

WRITERS = 4


def _composed(tmp_path: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from xfmr.paths import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(
            "train",
            [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"paths.log_dir={tmp_path}", *overrides],
            return_hydra_config=True,
        )


def test_sqlite_is_refused_for_jobs_on_several_hosts(tmp_path: Path) -> None:
    from xfmr.sweeps.stores import check_shared_stores

    slurm = _composed(tmp_path, ["hydra/launcher=submitit_slurm", "logger=mlflow"])
    with pytest.raises(UserError) as refused:
        check_shared_stores(slurm, None)
    message = str(refused.value)
    assert message.startswith(f"logger.mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db")
    assert "hydra/launcher=submitit_slurm" in message and "http://HOST:5000" in message

    slurm_csv = _composed(tmp_path, ["hydra/launcher=submitit_slurm", "logger=csv"])
    with pytest.raises(UserError, match=r"^hydra\.sweeper\.storage=sqlite:///s\.db: .*unset"):
        check_shared_stores(slurm_csv, "sqlite:///s.db")
    with pytest.raises(UserError, match=r"\(hydra\.launcher\.nodes=2\)"):
        check_shared_stores(_composed(tmp_path, ["logger=mlflow", "+hydra.launcher.nodes=2"]), None)

    server = _composed(
        tmp_path,
        [
            "hydra/launcher=submitit_slurm",
            "logger=mlflow",
            "logger.mlflow.tracking_uri=http://h:5000",
        ],
    )
    check_shared_stores(server, None)  # the default journal file, a tracking server
    check_shared_stores(server, "postgresql://h/optuna")
    for one_host in ("hydra/launcher=xfmr", "hydra/launcher=submitit_local"):
        check_shared_stores(_composed(tmp_path, [one_host, "logger=mlflow"]), "sqlite:///s.db")


OPTUNA_WRITER = (
    NO_FLOCK
    + """
import sys
import optuna
from xfmr.sweeps.search import open_storage

journal, trials = sys.argv[1], int(sys.argv[2])
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name="shared", storage=open_storage(journal))
study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=trials)
"""
)


def test_four_processes_add_trials_to_one_journal_study_and_lose_none(tmp_path: Path) -> None:
    import optuna

    from xfmr.sweeps.search import open_storage, storage_spec

    journal = storage_spec(None, tmp_path / "sweep")
    optuna.create_study(study_name="shared", storage=open_storage(journal))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", OPTUNA_WRITER, journal, "25"], stderr=subprocess.PIPE
        )
        for _ in range(WRITERS)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in writers]
    assert [w.returncode for w in writers] == [0] * WRITERS, errors
    study = optuna.load_study(study_name="shared", storage=open_storage(journal))
    assert sorted(t.number for t in study.trials) == list(range(WRITERS * 25))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert len({t._trial_id for t in study.trials}) == WRITERS * 25


MLFLOW_WRITER = (
    NO_FLOCK
    + """
import sys
from mlflow.tracking import MlflowClient

uri, experiment_id, writer = sys.argv[1], sys.argv[2], sys.argv[3]
client = MlflowClient(uri)
for number in range(3):
    run = client.create_run(experiment_id, run_name=f"job-{writer}-{number}")
    client.log_param(run.info.run_id, "writer", writer)
    for step in range(40):
        client.log_metric(run.info.run_id, "train/loss", 1.0 / (step + 1), step=step)
    client.set_tag(run.info.run_id, "xfmr.status", "completed")
    client.set_terminated(run.info.run_id, "FINISHED")
"""
)


def test_four_processes_log_runs_into_one_mlflow_file_store_and_lose_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's file store, which several hosts may share (each run's folder has one writer),
    the experiment created first as the sweep's own process does."""
    from mlflow.tracking import MlflowClient

    from xfmr.sweeps.stores import ensure_mlflow_experiment

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    experiment_id = ensure_mlflow_experiment(uri, "sweep")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", MLFLOW_WRITER, uri, experiment_id, str(w)],
            stderr=subprocess.PIPE,
            env={**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"},
        )
        for w in range(WRITERS)
    ]
    errors = [w.communicate(timeout=180)[1].decode() for w in writers]
    assert [w.returncode for w in writers] == [0] * WRITERS, errors
    client = MlflowClient(uri)
    runs = client.search_runs([experiment_id], max_results=1000)
    expected = {f"job-{w}-{n}" for w in range(WRITERS) for n in range(3)}
    assert sorted(r.info.run_name for r in runs) == sorted(expected)
    for run in runs:
        history = client.get_metric_history(run.info.run_id, "train/loss")
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(40))
        assert run.info.status == "FINISHED" and run.data.tags["xfmr.status"] == "completed"


def test_the_cli_refuses_sqlite_under_slurm_with_the_default_sweep_dir(tmp_path: Path) -> None:
    """The refusal as a user meets it: no hydra.sweep.dir given, so the default one (read
    through the Hydra config) must be fixed before submitit's launcher resolves its folder."""
    from helpers.cli import run_cli

    args = ["-m", "hydra/launcher=submitit_slurm", "logger=mlflow", "optim.lr=1e-3,2e-3"]
    result = run_cli(args, tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "HydraConfig was not set" not in result.stderr
    assert "logger.mlflow.tracking_uri=sqlite:///" in result.stderr
    assert str(tmp_path / "outputs" / "mlflow.db") in result.stderr
