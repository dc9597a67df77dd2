"""Training a composed experiment: one path from a checked config to a fitted run (lock, build,
fit), taken by `xfmr-train` and `xfmr.train` alike, and what a notebook expects around it.

In a notebook, `train`
- sets logging up for the run (its `train.log`, and the console when nothing else prints the
  log) and puts every logger it touched back afterwards;
- draws the step bar with tqdm, which renders in Jupyter;
- stops on Ctrl-C as `xfmr-train` stops on SIGINT: the state saved, `results.json` saying
  `interrupted`, and training the same experiment again resumes it.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from xfmr.api.composing import TASK_NAME, Experiment
from xfmr.api.runs import Run
from xfmr.config import RunConfig
from xfmr.errors import RunFailed, RunInterrupted, UserError
from xfmr.run_dir.files import CHECKPOINT_DIR, DDP_LOG_DIR, RESULTS_FILE, make_writable_dir

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
    run_dir = experiment.run_dir
    try:
        run_experiment(experiment)
    except RunInterrupted as e:
        stopped = e.stopped or str(e).split("; resume with:")[0]
        error = RunInterrupted(f"{stopped}; train the same experiment again to resume it")
        error.stopped, error.run = stopped, _opened(run_dir)
        raise error from None
    except RunFailed as e:
        e.run = _opened(run_dir)
        raise
    return Run(run_dir)


def run_experiment(experiment: Experiment) -> dict[str, Any] | None:
    """The one path of `xfmr-train` and `xfmr.train`: the run directory judged and made,
    logging set up, the run fitted; results.json's contents, or None on a rank that does not
    write them. A run refused before it began leaves no directory it made behind."""
    from xfmr.run_dir.cluster import check_not_rerun
    from xfmr.run_dir.lock import global_rank

    config = experiment.config
    if in_notebook():
        config = notebook_progress_bar(config)
    run_dir, rank = config.run_dir, global_rank()
    made = not run_dir.exists()
    if rank == 0:
        check_not_rerun(run_dir, given=experiment.run_dir_given)
    make_writable_dir(run_dir, key="hydra.run.dir")
    try:
        with run_logging(run_dir, rank=rank):
            results = fit(config, experiment.overrides)
            log.info("run directory: %s", run_dir)
    except UserError:
        if made and rank == 0:
            discard_unused(run_dir)
        raise
    return results


def _opened(run_dir: Path) -> Run | None:
    """The run, if it got as far as writing its config."""
    try:
        return Run(run_dir)
    except UserError:
        return None


def fit(config: RunConfig, overrides: Sequence[str]) -> dict[str, Any] | None:
    """Train the checked, resolved `config` in its run directory, holding the directory's
    lock, the one place it is taken for training: before torch loads, so one that another
    process trains in is refused at once (the other ranks of a run that torchrun or SLURM
    launched train beside rank 0, which holds it). A complaint of Lightning's about a
    person's input becomes a UserError."""
    from xfmr.run_dir.lock import hold_run_dir, is_global_rank_zero

    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    with hold_run_dir(run_dir) if is_global_rank_zero() else nullcontext():
        from lightning.fabric.utilities.exceptions import MisconfigurationException

        from xfmr.training.run import run_training  # torch and Lightning load only now

        try:
            return run_training(config, overrides=list(overrides))
        except MisconfigurationException as e:
            raise UserError(f"trainer: {e}") from None


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


def notebook_progress_bar(config: RunConfig) -> RunConfig:
    """The shipped step bar, drawn with tqdm instead of rich (which needs ipywidgets there);
    a bar of the person's own choosing is kept."""
    bar = config.callbacks.get("progress_bar")
    if bar is None or bar.path != _RICH_BAR:
        return config
    entries = {
        **config.callbacks.entries,
        "progress_bar": dataclasses.replace(bar, path=_NOTEBOOK_BAR),
    }
    return config.replace(callbacks=dataclasses.replace(config.callbacks, entries=entries))


@contextmanager
def run_logging(run_dir: Path, *, rank: int = 0) -> Iterator[None]:
    """Logging for the block: INFO and up to RUN_DIR/train.log (another rank of a run that
    torchrun or SLURM started: RUN_DIR/ddp/rankN.log, as xfmr's own DDP workers log) and,
    unless the root logger already prints somewhere, to stdout. Every logger's level,
    handlers, their filters and propagation are put back afterwards."""
    saved = [_logger_state(logging.getLogger(name)) for name in _LOGGERS]
    root = logging.getLogger()
    log_file = (
        run_dir / f"{TASK_NAME}.log" if rank == 0 else run_dir / DDP_LOG_DIR / f"rank{rank}.log"
    )
    log_file.parent.mkdir(parents=True, exist_ok=True)
    added: list[logging.Handler] = [logging.FileHandler(log_file)]
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
