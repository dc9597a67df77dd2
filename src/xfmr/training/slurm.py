"""Preemption and the time limit under SLURM, on Lightning's SLURMEnvironment.

SLURM warns a job before it ends it (`sbatch --signal=USR1@90`: USR1, 90 s ahead). The run takes
that signal as it takes SIGTERM (`xfmr.training.interrupts.StopOnSignal`): after the step under
way, where the ranks agree, it saves checkpoints/last.ckpt and stops; then rank 0 writes
results.json and puts the job back in the queue (`scontrol requeue JOBID`). The requeued job
keeps its id, so its run directory (`slurm-JOBID`, `xfmr.run_dir.cluster`) is found again and
the run resumes from that checkpoint.

Lightning's own auto-requeue (`SLURMEnvironment(auto_requeue=True)`, its default under SLURM)
saves `hpc_ckpt_N.ckpt` from inside the signal handler, wherever the step then is, and resumes
from it ahead of any other: a second checkpoint beside xfmr's, of a state between two steps.
So the environment is Lightning's, with its requeue signal, and its auto-requeue off; the
requeue is the command Lightning's signal connector runs, run once the state is saved.

A job of hydra/launcher=submitit_slurm (or submitit_local) is submitit's: its signal
(SUBMITIT_PREEMPT_SIGNAL, USR2 unless set, which submitit asks sbatch for) saves the state the
same way, and submitit's own handler then requeues the job (it re-submits the same Hydra job,
which trains in the same run directory and resumes).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from xfmr.config.options import SlurmConfig, signal_named
from xfmr.run_dir.cluster import slurm_job_id, under_slurm

log = logging.getLogger("xfmr")

# submitit sets SUBMITIT_FOLDER in the job's process; SUBMITIT_PREEMPT_SIGNAL names its signal
# (submitit.core.job_environment).
_SUBMITIT_FOLDER = "SUBMITIT_FOLDER"
_SUBMITIT_SIGNAL = "SUBMITIT_PREEMPT_SIGNAL"


@dataclass(frozen=True)
class Requeue:
    """The signal that asks this run to save and requeue its job, and who requeues it:
    `scontrol requeue job`, or, with `job` None, submitit's handler of the signal."""

    signal: signal.Signals
    job: str | None
    requeue: bool = True


def requeue_plan(slurm: SlurmConfig) -> Requeue | None:
    """The run's requeue signal and who requeues: submitit's signal in a submitit job,
    `slurm.requeue_signal` in a job srun started; None outside SLURM."""
    if _SUBMITIT_FOLDER in os.environ:
        name = os.environ.get(_SUBMITIT_SIGNAL, "USR2")
        return Requeue(signal_named(name, key=_SUBMITIT_SIGNAL), job=None)
    job = slurm_job_id()
    if job is None:
        return None
    return Requeue(slurm.signal, job=job, requeue=slurm.requeue)


def cluster_plugins(plan: Requeue | None) -> list[Any]:
    """Lightning's SLURMEnvironment when Lightning would detect SLURM, with the run's requeue
    signal and its own auto-requeue off (this module's doc says why)."""
    if not under_slurm():
        return []
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    signum = plan.signal if plan is not None else signal.SIGUSR1
    return [SLURMEnvironment(auto_requeue=False, requeue_signal=signum)]


def requeue(plan: Requeue) -> bool:
    """Put the job back in the queue; whether it was. In a submitit job this hands the signal
    to submitit's handler, which requeues and exits (SystemExit)."""
    if plan.job is None:
        signal.raise_signal(plan.signal)
        return True
    # As Lightning's signal connector does it (_SignalConnector._slurm_sigusr_handler_fn).
    try:
        code = subprocess.call(["scontrol", "requeue", plan.job])
    except FileNotFoundError:
        code = None
    if code == 0:
        log.warning("requeued SLURM job %s: it resumes from the checkpoint", plan.job)
        return True
    log.error(
        "could not requeue SLURM job %s (scontrol %s): resume it with a new job",
        plan.job,
        "not found" if code is None else f"exit code {code}",
    )
    return False
