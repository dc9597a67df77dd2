"""Training a composed experiment: one path from a checked config to a fitted run (lock, build,
fit), taken by `xfmr-train` and `xfmr.train` alike, and what a notebook expects around it.

In a notebook, `train`
- trains a copy of the experiment's config, so the caller's stays as it was;
- sets logging up for the run (its `train.log`, and the console when nothing else prints the
  log) and puts every logger it touched back afterwards;
- draws the step bar with tqdm, which renders in Jupyter;
- stops on Ctrl-C as `xfmr-train` stops on SIGINT: the state saved, `results.json` saying
  `interrupted`, and training the same experiment again resumes it.
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from xfmr.api.composing import TASK_NAME, Experiment
from xfmr.api.runs import Run
from xfmr.checks import check_config
from xfmr.errors import RunFailed, RunInterrupted, UserError
from xfmr.run_dir.files import CHECKPOINT_DIR, RESULTS_FILE, make_writable_dir

log = logging.getLogger("xfmr")

# What a run that began training leaves in its directory.
_TRAINED = (CHECKPOINT_DIR, RESULTS_FILE)
# The loggers a run configures: the root (console and train.log), xfmr's, and Lightning's
# (`xfmr.training.run.tidy_lightning_logging` sends theirs through the root).
_LOGGERS = ("", "xfmr", "lightning", "lightning.pytorch", "lightning.fabric")
# Hydra's format for the job's log file (hydra/job_logging/default.yaml).
_FILE_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
_RICH_BAR = "xfmr.training.progress_bars.StepProgressBar"
_NOTEBOOK_BAR = "xfmr.training.progress_bars.NotebookStepProgressBar"


def train(experiment: Experiment) -> Run:
    """Train `experiment` (from `xfmr.compose`) in its run directory and return the run.

    The directory's newest checkpoint, if any, is resumed, as `xfmr-train hydra.run.dir=DIR`
    resumes: after Ctrl-C, training the same experiment again goes on where it stopped.

    Raises:
        UserError: the config, data or a checkpoint is refused (the command line's message);
            a run directory made for it is removed again.
        RunFailed: training stopped (e.g. the loss stopped being a number); `.run` is the run
            (its results.json says why).
        RunInterrupted: Ctrl-C (or SIGTERM) stopped it after saving its state; `.run` is the
            run.
    """
    if not isinstance(experiment, Experiment):
        raise UserError(
            f"train takes an experiment from xfmr.compose(...), not {type(experiment).__name__}"
        )
    cfg = OmegaConf.create(OmegaConf.to_container(experiment.config))  # the caller's stays put
    check_config(cfg)
    if in_notebook():
        notebook_progress_bar(cfg)
    run_dir = Path(str(cfg.paths.output_dir))
    made = not run_dir.exists()
    make_writable_dir(run_dir, key="hydra.run.dir")
    try:
        with run_logging(run_dir):
            fit_checked(cfg, experiment.overrides)
            log.info("run directory: %s", run_dir)
    except UserError:
        if made:
            discard_unused(run_dir)
        raise
    except RunInterrupted as e:
        stopped = e.stopped or str(e).split("; resume with:")[0]
        error = RunInterrupted(f"{stopped}; train the same experiment again to resume it")
        error.stopped, error.run = stopped, _opened(run_dir)
        raise error from None
    except RunFailed as e:
        e.run = _opened(run_dir)
        raise
    return Run(run_dir)


def _opened(run_dir: Path) -> Run | None:
    """The run, if it got as far as writing its config."""
    try:
        return Run(run_dir)
    except UserError:
        return None


def fit_checked(cfg: DictConfig, overrides: Sequence[str]) -> dict[str, Any] | None:
    """Train the checked, resolved `cfg` in `cfg.paths.output_dir`, holding the directory's
    lock, the one place it is taken for training: before torch loads, so one that another
    process trains in is refused at once (the other ranks of a run that torchrun or SLURM
    launched train beside rank 0, which holds it). A complaint of Lightning's or of a builder
    about a person's input becomes a UserError."""
    from xfmr.run_dir.lock import hold_run_dir, is_global_rank_zero

    run_dir = Path(cfg.paths.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with hold_run_dir(run_dir) if is_global_rank_zero() else nullcontext():
        from hydra.errors import InstantiationException
        from lightning.fabric.utilities.exceptions import MisconfigurationException

        from xfmr.training.run import run_training  # torch and Lightning load only now

        try:
            return run_training(cfg, overrides=list(overrides))
        except MisconfigurationException as e:
            raise UserError(f"trainer: {e}") from None
        except InstantiationException as e:
            if isinstance(e.__cause__, UserError):  # a builder's own one-line message
                raise e.__cause__ from None
            raise UserError(instantiation_problem(e)) from None


def instantiation_problem(error: Exception) -> str:
    """One line from Hydra's "Error in call to target ... full_key: KEY" message: the config
    section and what its constructor said."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    section = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("full_key:")), None
    )
    said = str(error.__cause__).strip() if error.__cause__ is not None else ""
    if not said:
        said = "; ".join(line for line in lines if not line.startswith("full_key:"))
    return f"{section}: {' '.join(said.split())}" if section else " ".join(said.split())


def discard_unused(path: Path) -> None:
    """Remove the run directory `path`, made for a run that was refused before it began (no
    checkpoints/, no results.json); one another process holds locked is left to it."""
    from xfmr.run_dir.lock import hold_run_dir

    if not path.is_dir() or any((path / name).exists() for name in _TRAINED):
        return
    try:
        with hold_run_dir(path):
            shutil.rmtree(path, ignore_errors=True)
    except UserError:
        pass


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (rich's test: IPython's shell is ZMQ's)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def notebook_progress_bar(cfg: DictConfig) -> None:
    """The shipped step bar, drawn with tqdm instead of rich (which needs ipywidgets there);
    a bar of the person's own choosing is kept."""
    bar = (cfg.get("callbacks") or {}).get("progress_bar")
    if bar is not None and bar.get("_target_") == _RICH_BAR:
        with open_dict(cfg):
            bar._target_ = _NOTEBOOK_BAR


@contextmanager
def run_logging(run_dir: Path) -> Iterator[None]:
    """Logging as `xfmr-train` sets it up under Hydra, for the block: INFO and up to
    RUN_DIR/train.log and, unless the root logger already prints somewhere, to stdout. Every
    logger's level, handlers, their filters and propagation are put back afterwards."""
    saved = [_logger_state(logging.getLogger(name)) for name in _LOGGERS]
    root = logging.getLogger()
    added: list[logging.Handler] = [logging.FileHandler(run_dir / f"{TASK_NAME}.log")]
    added[0].setFormatter(logging.Formatter(_FILE_FORMAT))
    if not root.handlers:
        console = logging.StreamHandler(sys.stdout)
        console.setFormatter(logging.Formatter("%(message)s"))
        added.append(console)
    for handler in added:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        for handler in added:
            root.removeHandler(handler)
            handler.close()
        for state in saved:
            _restore_logger(*state)


def _logger_state(logger: logging.Logger) -> tuple[Any, ...]:
    handlers = list(logger.handlers)
    return logger, logger.level, handlers, [list(h.filters) for h in handlers], logger.propagate


def _restore_logger(
    logger: logging.Logger,
    level: int,
    handlers: list[logging.Handler],
    filters: list[list[Any]],
    propagate: bool,
) -> None:
    logger.setLevel(level)
    logger.handlers[:] = handlers
    for handler, kept in zip(handlers, filters, strict=True):
        handler.filters[:] = kept
    logger.propagate = propagate
