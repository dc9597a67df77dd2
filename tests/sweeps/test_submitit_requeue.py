"""A sweep's job preempted under submitit (hydra/launcher=submitit_local, the same code as
submitit_slurm but for the scheduler): submitit's signal (USR2), sent to the job's process for
real, saves the job's state at a step boundary; submitit's handler requeues the job, which
resumes in its own run directory and ends as the job that was never stopped."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import helpers_env
from helpers.cli import run_cli, started
from helpers.runs import CORPUS, TINY, read_results

STEPS = 20
ARGS = [
    *TINY,
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=10",
    "logger=none",
    "callbacks.text_sample=null",
    "callbacks.periodic_checkpoint.every_n_train_steps=2",
]


def _job_process(submitit_dir: Path) -> int | None:
    """The pid of the process submitit runs the job in (`python -m submitit.core._submit`)."""
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"submitit.core._submit" in command and str(submitit_dir).encode() in b" ".join(command):
            return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the job in /proc")
def test_a_preempted_submitit_job_is_requeued_and_resumes_its_own_run(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    data = ["data=text", f"data.path={corpus}"]
    sweep = tmp_path / "sweep"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))},
        **helpers_env(),  # helpers.slow_steps
        "XFMR_CACHE_DIR": str(tmp_path / ".cache"),
        "PYTHONUNBUFFERED": "1",
    }
    command = [
        sys.executable, "-m", "xfmr.cli.train", "-m",
        "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
        f"hydra.sweep.dir={sweep}", *ARGS, *data,
        "+callbacks.slow._target_=helpers.slow_steps.SlowSteps",
    ]  # fmt: skip
    job_dir = sweep / "0"
    with started(command, tmp_path, env) as proc:
        deadline = time.monotonic() + 300
        while not list((job_dir / "checkpoints").glob("step-*.ckpt")):  # the job trains
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        job = _job_process(sweep / ".submitit")
        assert job is not None
        os.kill(job, signal.SIGUSR2)  # what submitit's scheduler sends ahead of the time limit
        output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    log = (job_dir / "train.log").read_text()
    assert "SIGUSR2 received: saving a checkpoint" in log
    assert "Requeued job" in log  # submitit's handler
    assert f"resuming from {job_dir / 'checkpoints' / 'last.ckpt'}" in log
    assert sorted(p.name for p in sweep.iterdir() if not p.name.startswith(".")) == [
        "0",
        "multirun.yaml",
        "sweep.json",
    ]
    results = read_results(job_dir)
    assert results["status"] == "completed" and results["step"] == STEPS
    assert results["resumed_from"] == str(job_dir / "checkpoints" / "last.ckpt")

    # As the job would have ended unstopped.
    reference = tmp_path / "reference"
    done = run_cli([*ARGS, *data, f"hydra.run.dir={reference}"], tmp_path)
    assert done.returncode == 0, done.output
    assert results["metrics"]["val/loss"] == read_results(reference)["metrics"]["val/loss"]
    ours, theirs = (
        torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        for d in (job_dir, reference)
    )
    for name, tensor in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][name], tensor), name
