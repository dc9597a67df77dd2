"""The run directory's name under SLURM and torchrun (`${run_name:...}`), the requeue signal's
config, and the SLURM detection kept torch-free beside Lightning's own."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from xfmr.errors import UserError
from xfmr.run_dir.cluster import run_name, slurm_job_id, under_slurm

_CLUSTER_VARIABLES = (
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_NTASKS",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "WORLD_SIZE",
    "SUBMITIT_FOLDER",
    "SUBMITIT_PREEMPT_SIGNAL",
)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _slurm(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    for name, value in {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "1", **extra}.items():
        monkeypatch.setenv(name, value)


def test_a_run_is_named_after_its_slurm_job_or_its_torchrun_id_else_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert run_name("2026-01-01_00-00-00") == "2026-01-01_00-00-00"
    _slurm(monkeypatch)
    assert run_name("time") == "slurm-77"
    _slurm(monkeypatch, SLURM_ARRAY_JOB_ID="70", SLURM_ARRAY_TASK_ID="3")
    assert run_name("time") == "slurm-70_3"  # the array's task, as scontrol requeue names it
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # Lightning does not take SLURM's ranks
    assert run_name("time") == "time"

    for name in _CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "exp1")
    assert run_name("time") == "torchrun-exp1"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun without --rdzv-id
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert run_name("time") == "time"
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="--rdzv-id ID.*hydra.run.dir=DIR"):
        run_name("time")


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SLURM_JOB_ID": "5"},  # an allocation without srun's tasks
        {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "1"},
        {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train"},
        {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "bash"},
        {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "interactive"},
    ],
)
def test_slurm_is_detected_as_lightning_detects_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    from lightning.fabric.plugins.environments import SLURMEnvironment

    monkeypatch.delenv("SLURM_NTASKS_PER_NODE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert under_slurm() == SLURMEnvironment.detect()
    assert (slurm_job_id() is not None) == SLURMEnvironment.detect()


def test_the_shipped_run_directory_is_the_jobs_under_slurm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import xfmr

    monkeypatch.chdir(tmp_path)
    outside = xfmr.compose("size=tiny").run_dir
    assert outside.parent == tmp_path / "outputs" / "train" / "runs"
    assert not outside.name.startswith("slurm-")
    _slurm(monkeypatch, SLURM_JOB_NAME="train")
    assert xfmr.compose("size=tiny").run_dir == outside.parent / "slurm-77"


def test_the_requeue_signal_is_the_configs_or_submitits(monkeypatch: pytest.MonkeyPatch) -> None:
    from xfmr.config.options import SlurmConfig
    from xfmr.training.slurm import requeue_plan

    slurm = SlurmConfig.read({"requeue_signal": "USR1", "requeue": True})
    assert requeue_plan(slurm) is None  # not under SLURM
    _slurm(monkeypatch, SLURM_JOB_NAME="train")
    plan = requeue_plan(slurm)
    assert (plan.signal, plan.job, plan.requeue) == (signal.SIGUSR1, "77", True)
    plan = requeue_plan(SlurmConfig.read({"requeue_signal": "SIGUSR2", "requeue": False}))
    assert (plan.signal, plan.requeue) == (signal.SIGUSR2, False)
    for bad in ("TERM", "INT", "KILL", "USR3", "0"):  # refused when the config is read
        with pytest.raises(UserError, match=f"slurm.requeue_signal='{bad}'"):
            SlurmConfig.read({"requeue_signal": bad, "requeue": True})
    # A submitit job answers submitit's signal, and submitit's handler requeues it.
    monkeypatch.setenv("SUBMITIT_FOLDER", "/tmp/submitit")
    plan = requeue_plan(slurm)
    assert (plan.signal, plan.job) == (signal.SIGUSR2, None)
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert requeue_plan(slurm).signal == signal.SIGUSR1


def test_a_slurm_run_directory_is_taken_up_again_only_by_its_requeued_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xfmr.run_dir.cluster import check_not_rerun

    run_dir = tmp_path / "slurm-77"
    (run_dir / "checkpoints").mkdir(parents=True)
    check_not_rerun(run_dir, given=False)  # not under SLURM: any directory resumes
    _slurm(monkeypatch, SLURM_JOB_NAME="train")
    with pytest.raises(UserError, match="already holds a run of SLURM job 77"):
        check_not_rerun(run_dir, given=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    check_not_rerun(run_dir, given=False)  # the requeued job resumes it
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    check_not_rerun(tmp_path / "slurm-78", given=False)  # nothing there yet
    check_not_rerun(run_dir, given=True)  # a directory named on the command line resumes
