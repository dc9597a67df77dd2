"""The run directory, judged before Hydra makes it: one that cannot be created or written is
refused in one line; one made for a run that a config mistake then refused is removed again,
so a mistake leaves no empty run directory behind (an existing one is left as it was).

A run that torchrun or SLURM started on several processes (several nodes) is one run in one
directory: rank 0 writes it; the other ranks train beside it, their log in RUN_DIR/ddp/rankN.log,
and leave Hydra's record (.hydra/) and train.log to rank 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import InterpolationResolutionError

from xfmr.cli.common import fail
from xfmr.errors import UserError
from xfmr.run_dir.cluster import slurm_job_id, slurm_restarts, slurm_run_name
from xfmr.run_dir.files import CHECKPOINT_DIR, DDP_LOG_DIR, RESULTS_FILE, make_writable_dir
from xfmr.run_dir.lock import global_rank

# The run directory this process made, set by `RunDirectory` (one run per process).
_made: list[Path] = []


class RunDirectory(Callback):
    """`hydra.callbacks.run_dir`: checks `hydra.run.dir` before Hydra creates it, which would
    end in a traceback. Sweeps check theirs in `xfmr.sweeps.sweep`."""

    def __init__(self, prog: str = "xfmr-train") -> None:
        self.prog = prog

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        # For ${hydra:...} in the path, as Hydra itself does next.
        HydraConfig.instance().set_config(config)
        _made.clear()
        rank = global_rank()
        try:  # Hydra swallows a callback's exceptions, not its exit
            path = Path(str(config.hydra.run.dir)).absolute()
            if rank == 0:
                check_not_rerun(path, config)
                if not path.exists():
                    _made.append(path)
            make_writable_dir(path, key="hydra.run.dir")
        except UserError as e:
            fail(self.prog, str(e))
        except InterpolationResolutionError as e:  # `${run_name:...}` refused the environment
            refused = _user_error_in(e)
            if refused is None:
                raise
            fail(self.prog, str(refused))
        if rank != 0:
            beside_rank_zero(config, path, rank)


def _user_error_in(error: BaseException | None) -> UserError | None:
    """The UserError a resolver raised, which OmegaConf wraps (twice) in its own."""
    while error is not None and not isinstance(error, UserError):
        error = error.__cause__ or error.__context__
    return error


def beside_rank_zero(config: DictConfig, path: Path, rank: int) -> None:
    """Another rank of the run in `path`: its log goes to RUN_DIR/ddp/rankN.log, as a DDP
    worker's does, and Hydra's record of the job is rank 0's alone."""
    log_file = path / DDP_LOG_DIR / f"rank{rank}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.output_subdir = None
        handlers = config.hydra.job_logging.get("handlers") or {}
        if "file" in handlers:
            handlers.file.filename = str(log_file)


def check_not_rerun(path: Path, config: DictConfig) -> None:
    """Under SLURM the run directory is named after the job (`${run_name:...}`): a job that
    SLURM requeued (SLURM_RESTART_COUNT > 0) finds its run there and resumes it. A job that was
    not requeued finding a run there is a second `xfmr-train` of one job (two srun lines of one
    script): refused rather than resuming the first one's run."""
    name = slurm_run_name()
    given = any(o.startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
    if name is None or given or path.name != name or slurm_restarts() > 0:
        return
    job = slurm_job_id()
    if any((path / name).exists() for name in (CHECKPOINT_DIR, RESULTS_FILE)):
        raise UserError(
            f"{path} already holds a run of SLURM job {job}, and SLURM did not requeue this "
            "job (SLURM_RESTART_COUNT is unset or 0), so it is not that run resuming: give each "
            "xfmr-train of one job a directory of its own (hydra.run.dir=DIR)"
        )


def discard_unused_run_dir() -> None:
    """The run directory this run made, removed if nothing trained there (no checkpoints/, no
    results.json): the run was refused before it began, and everything in the directory is
    this command's (Hydra's files, the log, the lock, a tokenizer). One that another process
    started on the same path at the same moment holds locked is left to it."""
    from xfmr.api.training import discard_unused

    for path in _made:
        discard_unused(path)
    _made.clear()
