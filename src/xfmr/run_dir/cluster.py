"""Which cluster started this process, read from the environment it set (no torch, no Lightning,
so the run directory is named before anything heavy loads), and the run directory's name that
every process of one job agrees on.

`${run_name:DEFAULT}` in conf/hydra/default.yaml (registered by `hydra_plugins.xfmr_run_name`):

- under SLURM, `slurm-JOBID` (`slurm-ARRAYJOBID_TASKID` for a task of an array): every task of
  the job, on every node, and the same job requeued (SLURM keeps its id and counts
  SLURM_RESTART_COUNT up) train in one directory, and the requeued job resumes from it;
- under torchrun with a rendezvous id (`--rdzv-id ID`, or `--standalone`'s), `torchrun-ID`;
- else DEFAULT (the time). A timestamp is each process's own clock: two processes that torchrun
  started without an id can name different seconds, so that case is refused rather than split.
"""

from __future__ import annotations

import os
from pathlib import Path

from xfmr.errors import UserError
from xfmr.run_dir.files import CHECKPOINT_DIR, RESULTS_FILE

# Lightning's SLURMEnvironment.detect(): srun set SLURM_NTASKS, and the job is not an
# interactive one (`srun --job-name=interactive`, or `bash`), whose processes are launched by
# other means. Kept torch-free here; tests/run_dir/test_cluster.py holds the two to agreeing.
_SLURM_INTERACTIVE_NAMES = ("bash", "interactive")
# torchrun's --rdzv-id when none is given (torch.distributed.run).
_NO_RDZV_ID = "none"


def under_slurm() -> bool:
    """Whether Lightning will take this process's ranks from SLURM."""
    return "SLURM_NTASKS" in os.environ and (
        os.environ.get("SLURM_JOB_NAME") not in _SLURM_INTERACTIVE_NAMES
    )


def slurm_job_id() -> str | None:
    """The job `scontrol requeue` takes: ARRAYJOBID_TASKID for a task of an array, else the
    job id (as Lightning's signal connector names it); None outside SLURM."""
    if not under_slurm() or "SLURM_JOB_ID" not in os.environ:
        return None
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array is not None:
        task = plain_component("SLURM_ARRAY_TASK_ID", os.environ.get("SLURM_ARRAY_TASK_ID"))
        return f"{plain_component('SLURM_ARRAY_JOB_ID', array)}_{task}"
    return plain_component("SLURM_JOB_ID", os.environ["SLURM_JOB_ID"])


def plain_component(variable: str, value: str | None) -> str:
    """`value`, an id the environment gives, if it can name a directory of its own: one path
    component, not `.` or `..`, no separator (an id holding `/..` would put the run, its
    checkpoints and its lock outside the outputs folder)."""
    text = "" if value is None else str(value)
    separators = {"/", "\\", "\0"} | ({os.sep, os.altsep} - {None})
    if text in ("", ".", "..") or any(s in text for s in separators):
        raise UserError(
            f"{variable}={text!r} cannot name the run directory: an id from the environment "
            "must be one plain path component (no '/', not '.' or '..'); fix the variable or "
            "give hydra.run.dir=DIR"
        )
    return text


def slurm_restarts() -> int:
    """How many times SLURM has requeued this job (SLURM_RESTART_COUNT, unset on a first start)."""
    count = os.environ.get("SLURM_RESTART_COUNT", "0")
    return int(count) if count.isdigit() else 0


def slurm_run_name() -> str | None:
    """The run directory's name under SLURM: `slurm-JOBID`; None outside SLURM."""
    job = slurm_job_id()
    return None if job is None else f"slurm-{job}"


def run_name(default: str) -> str:
    """The run directory's name all processes of this job agree on (see the module's doc)."""
    slurm_name = slurm_run_name()
    if slurm_name is not None:
        return slurm_name
    rdzv_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if rdzv_id is None:
        return default
    if rdzv_id != _NO_RDZV_ID:
        return f"torchrun-{plain_component('TORCHELASTIC_RUN_ID', rdzv_id)}"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UserError(
            "torchrun started this run without a rendezvous id, and each process would name "
            "its run directory after its own clock: give every node the same "
            "`torchrun --rdzv-id ID` (the run goes to .../runs/torchrun-ID) or the same "
            "hydra.run.dir=DIR"
        )
    return default


def check_not_rerun(path: Path, *, given: bool) -> None:
    """Under SLURM the run directory is named after the job (`${run_name:...}`): a job that
    SLURM requeued (SLURM_RESTART_COUNT > 0) finds its run there and resumes it. A job that was
    not requeued finding a run there is a second `xfmr-train` of one job (two srun lines of one
    script): refused rather than resuming the first one's run. A directory named on the command
    line (`given`) is the person's to resume."""
    name = slurm_run_name()
    if name is None or given or path.name != name or slurm_restarts() > 0:
        return
    if any((path / entry).exists() for entry in (CHECKPOINT_DIR, RESULTS_FILE)):
        raise UserError(
            f"{path} already holds a run of SLURM job {slurm_job_id()}, and SLURM did not "
            "requeue this job (SLURM_RESTART_COUNT is unset or 0), so it is not that run "
            "resuming: give each xfmr-train of one job a directory of its own "
            "(hydra.run.dir=DIR)"
        )
