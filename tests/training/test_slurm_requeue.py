"""SLURM's warning before the time limit (`sbatch --signal=USR1@90`), for real: `xfmr-train`
in a SLURM job's environment (Lightning detects SLURM from it) and `scontrol` a script that
records what it was asked. USR1 saves checkpoints/last.ckpt, requeues the job and ends the
process; the requeued job (same id, SLURM_RESTART_COUNT=1) resumes in the same directory and
ends as the run that was never stopped did."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch

from helpers import helpers_env
from helpers.cli import run_cli, started
from helpers.runs import CORPUS, RESUMABLE_STEPS, read_results, resumable

STEPS = RESUMABLE_STEPS
COMMON = resumable(checkpoint_every=2)
JOB = "4242"
SCONTROL = """#!/bin/sh
echo "$@" >> "$XFMR_TEST_SCONTROL"
"""


def _slurm_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A one-task SLURM job's environment, as srun sets it, with `scontrol` recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    return {
        **env,
        "PATH": os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
        **helpers_env(),  # helpers.slow_steps
        "XFMR_TEST_SCONTROL": str(tmp_path / "scontrol.calls"),
        "XFMR_CACHE_DIR": str(tmp_path / ".cache"),
        "PYTHONUNBUFFERED": "1",
        "SLURM_JOB_ID": JOB,
        "SLURM_JOB_NAME": "xfmr",  # not "bash" or "interactive", so Lightning sees SLURM
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        **extra,
    }


def _state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def test_usr1_requeues_the_job_and_the_requeued_job_resumes_exactly(tmp_path: Path) -> None:
    (tmp_path / "corpus.txt").write_text(CORPUS)
    data = ["data=text", f"data.path={tmp_path / 'corpus.txt'}", "data.block_size=16"]
    reference = tmp_path / "reference"
    done = run_cli([*COMMON, *data, f"hydra.run.dir={reference}"], tmp_path)
    assert done.returncode == 0, done.output

    # The job's command names no run directory: under SLURM it is named after the job.
    args = [
        *COMMON,
        *data,
        f"paths.log_dir={tmp_path / 'logs'}",
        "+callbacks.slow._target_=helpers.slow_steps.SlowSteps",
    ]
    run_dir = tmp_path / "logs" / "train" / "runs" / f"slurm-{JOB}"
    command = [sys.executable, "-m", "xfmr.cli.train", *args]
    with started(command, tmp_path, _slurm_env(tmp_path)) as proc:
        deadline = time.monotonic() + 300  # generous: a loaded machine starts slowly
        while not list((run_dir / "checkpoints").glob("step-*.ckpt")):  # training is under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "SIGUSR1: stopped after step" in output and "job requeued" in output
    assert (tmp_path / "scontrol.calls").read_text().splitlines() == [f"requeue {JOB}"]
    stopped = read_results(run_dir)
    assert stopped["status"] == "interrupted" and stopped["requeued"] is True
    assert stopped["slurm_job_id"] == JOB and stopped["slurm_restart_count"] == 0
    assert 0 < stopped["step"] < STEPS, "the signal must arrive while the run trains"
    assert _state(run_dir)["global_step"] == stopped["step"]
    # One checkpoint of the stop, where xfmr resumes from: no hpc_ckpt_N.ckpt of Lightning's
    # auto-requeue, no last-v1.ckpt of its ModelCheckpoint.
    assert not list(run_dir.rglob("hpc_ckpt_*"))
    assert [p.name for p in (run_dir / "checkpoints").glob("last*")] == ["last.ckpt"]

    # SLURM starts the requeued job with the same command, id and a restart count.
    resumed = run_cli(args, tmp_path, env=_slurm_env(tmp_path, SLURM_RESTART_COUNT="1"))
    assert resumed.returncode == 0, resumed.output
    assert f"resuming from {run_dir / 'checkpoints'}" in resumed.output
    assert [p.name for p in run_dir.parent.iterdir()] == [f"slurm-{JOB}"]
    ours, theirs = read_results(run_dir), read_results(reference)
    assert ours["status"] == "completed" and ours["requeued"] is False
    assert ours["slurm_restart_count"] == 1
    assert ours["step"] == theirs["step"] == STEPS
    assert ours["metrics"]["val/loss"] == theirs["metrics"]["val/loss"]
    a, b = _state(run_dir), _state(reference)
    for name, tensor in b["state_dict"].items():
        assert torch.equal(a["state_dict"][name], tensor), name
    for index, state in b["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(a["optimizer_states"][0]["state"][index][key], value), (index, key)
    assert (tmp_path / "scontrol.calls").read_text().splitlines() == [f"requeue {JOB}"]

    # The same job id without a requeue is a second xfmr-train of one job, not this run.
    again = run_cli(args, tmp_path, env=_slurm_env(tmp_path))
    assert again.returncode == 2, again.output
    assert f"already holds a run of SLURM job {JOB}" in again.output
