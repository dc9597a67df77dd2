"""Fitting a run's module with Lightning: the Trainer, loggers and callbacks the config names (and
the run's own: the summary, signals, pruning, the continued CSV log), the DDP workers it
launches, and how fitting ended: completed, pruned, interrupted or failed (and why)."""

from __future__ import annotations

import logging
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from xfmr.config import RunConfig
from xfmr.errors import DiskFull, RunFailed
from xfmr.parts.build import Parts
from xfmr.run_dir.files import CHECKPOINT_DIR, CONFIG_FILE, DDP_LOG_DIR, LAST_CHECKPOINT
from xfmr.targets import plain
from xfmr.text.tokenizers import TextTokenizer
from xfmr.training.checkpoint_saving import AtomicCheckpointIO
from xfmr.training.guards import TrialPruning, out_of_memory
from xfmr.training.interrupts import ContinuedCsvLog, StopOnSignal
from xfmr.training.launch import LocalDDPLauncher, processes_to_launch
from xfmr.training.loggers import finish_loggers, log_run_params, read_csv_rows
from xfmr.training.model_summary import SUMMARY_FROM_TRAINER
from xfmr.training.module import TAKEN_FROM_TRAINER, XfmrModule
from xfmr.training.run_summary import RunSummary
from xfmr.training.slurm import Requeue, cluster_plugins, requeue_plan
from xfmr.training.text_sample import TextSample

log = logging.getLogger("xfmr")


@dataclass
class Fitted:
    """How fitting ended: the trainer, the run's status and, if it failed, why."""

    trainer: L.Trainer
    summary: RunSummary
    stop_on_signal: StopOnSignal
    status: str
    failure: str | None
    requeue: Requeue | None = None  # the requeue signal under SLURM, and who requeues


def fit_run(
    config: RunConfig, parts: Parts, module: XfmrModule, *, ckpt_path: str | None, is_worker: bool
) -> Fitted:
    """Fit `module` on the parts' data with the config's trainer, loggers and callbacks (and
    the DDP workers it launches); validate and save the last state of a run that ended well."""
    run_dir = config.run_dir
    summary = RunSummary(
        peak_tflops=config.throughput.peak_tflops, cache_dir=config.paths.cache_dir
    )
    nprocs = 1 if is_worker else processes_to_launch(plain(config.trainer.settings))
    launcher = (
        LocalDDPLauncher(nprocs, run_dir / CONFIG_FILE, run_dir / DDP_LOG_DIR)
        if nprocs > 1
        else nullcontext()
    )
    requeue = requeue_plan(config.slurm)
    stop_on_signal = StopOnSignal(
        run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT,
        requeue_signal=requeue.signal if requeue is not None else None,
    )
    pruning = TrialPruning(config.trial.to_dict()) if config.trial else None
    earlier_rows = read_csv_rows(config.logger) if ckpt_path and not is_worker else []
    with launcher, float32_matmuls(config.trainer.matmul_precision):
        loggers = config.logger.build()
        log_run_params(loggers, config.to_dict(), config.optimized_metric, module.val_metrics)
        # The summary first: a logging step's figures are ready for the progress bar.
        callbacks = [summary, *config.callbacks.build(), stop_on_signal]
        callbacks += [pruning] if pruning else []
        callbacks += [ContinuedCsvLog(earlier_rows)] if earlier_rows else []
        hand_run(callbacks, config, parts)
        trainer = config.trainer.build(
            callbacks=_fitting(callbacks, loggers, parts.tokenizer),
            logger=loggers or False,
            default_root_dir=str(run_dir),
            plugins=[AtomicCheckpointIO(), *cluster_plugins(requeue)],
            **TAKEN_FROM_TRAINER,
            **SUMMARY_FROM_TRAINER,
        )
        failure = fit(trainer, module, parts.datamodule, ckpt_path, config, stop_on_signal)
        status = run_status(trainer, failure, pruning, stop_on_signal)
        if status in ("completed", "pruned"):
            with keyboard_interrupt_returns(stop_on_signal):  # Ctrl-C in the last validation
                failure, status = _close(
                    trainer, module, parts.datamodule, summary, run_dir, status
                )
            if stop_on_signal.keyboard_interrupt:
                status = "interrupted"
        finish_loggers(trainer, status)
    return Fitted(trainer, summary, stop_on_signal, status, failure, requeue)


@contextmanager
def float32_matmuls(precision: str) -> Iterator[None]:
    """`trainer.matmul_precision` set with `torch.set_float32_matmul_precision` while the run
    fits, and put back after (a notebook's next run, or its own code, gets its own)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _fitting(callbacks: list[Any], loggers: list[Any], tokenizer: TextTokenizer) -> list[Any]:
    """The callbacks, minus what has nothing to report to, with what they need at run time."""
    if not loggers:  # with logger=none there is nowhere to send learning rates
        callbacks = [c for c in callbacks if type(c).__name__ != "LearningRateMonitor"]
    for callback in callbacks:
        if isinstance(callback, TextSample):
            callback.tokenizer = tokenizer
    return callbacks


def hand_run(callbacks: list[Any], config: RunConfig, parts: Parts) -> None:
    """A callback with a `use_run(config, parts)` method gets the run's config and parts (the
    tokenizer, the objective, the model's config) before fitting: one from a layer above this
    (`xfmr.evaluation.in_training.LmEval`, named in conf/callbacks by its `_target_`), which
    this layer cannot import to recognise."""
    for callback in callbacks:
        use_run = getattr(callback, "use_run", None)
        if callable(use_run):
            use_run(config, parts)


def _close(
    trainer: L.Trainer,
    module: XfmrModule,
    datamodule: Any,
    summary: RunSummary,
    run_dir: Path,
    status: str,
) -> tuple[str | None, str]:
    """Validate the last step (unless it just was) and save the last state: (failure, status).

    A run resumed when it had already finished trains no step and validates nothing: it is
    validated again, so that results.json still has its final metrics. (Lightning calls the
    summary's on_validation_end from `validate` too, which records the entry.)"""
    validated = summary.history and summary.history[-1]["step"] == trainer.global_step
    if not validated or summary.monitor not in trainer.callback_metrics:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    try:
        trainer.save_checkpoint(run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)
    except DiskFull as e:
        return str(e), "failed"
    return None, status


def fit(
    trainer: L.Trainer,
    module: XfmrModule,
    datamodule: Any,
    ckpt_path: str | None,
    config: RunConfig,
    stop_on_signal: StopOnSignal,
) -> str | None:
    """Train; the reason the run failed (a loss that is not a number, a full disk, memory run
    out), or None. The checkpoints on disk are then the last ones written whole."""
    try:
        with keyboard_interrupt_returns(stop_on_signal):
            # Lightning's own load of ckpt_path is as safe as resolve_checkpoint's read of it.
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except DiskFull as e:  # a checkpoint that did not fit; the ones before it are whole
        return (
            f"step {trainer.global_step}: {e}; the same command then resumes from the newest "
            f"checkpoint in {config.run_dir / CHECKPOINT_DIR}"
        )
    except RunFailed as e:
        return str(e)
    except (RuntimeError, MemoryError) as e:
        reason = out_of_memory(e, config.data, config.trainer.precision)
        if reason is None:
            raise
        log.error("%s", e)
        return reason
    return None


@contextmanager
def keyboard_interrupt_returns(stop_on_signal: StopOnSignal) -> Iterator[None]:
    """Lightning answers a KeyboardInterrupt by ignoring SIGINT from then on and calling
    `sys.exit(1)`, which would end a notebook's kernel for Ctrl-C. Here the state is saved
    (`StopOnSignal.on_exception`), SIGINT's handler is put back and fitting returns, so the run
    ends `interrupted` as on SIGINT; a second interrupt, which saves nothing, raises
    KeyboardInterrupt."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    try:
        yield
    except SystemExit:
        if not stop_on_signal.keyboard_interrupt:
            raise
        if stop_on_signal.stopped_at is None:
            raise KeyboardInterrupt from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_status(
    trainer: L.Trainer,
    failure: str | None,
    pruning: TrialPruning | None,
    stop_on_signal: StopOnSignal,
) -> str:
    if failure:
        return "failed"
    if trainer.interrupted or stop_on_signal.stopped_at is not None:
        return "interrupted"
    if pruning is not None and pruning.pruned_at is not None:
        return "pruned"
    return "completed"


_NOISE = (
    "litlogger",
    "`weights_only` was not set",
    "GPU available:",
    "TPU available:",
    "Skipping setting a default `ModelSummary`",  # xfmr's own summary is in the callbacks
    # Lightning's tip to call torch.set_float32_matmul_precision, given where it is `highest` on
    # a GPU with tensor cores: trainer.matmul_precision is that choice, made in the config.
    "that has Tensor Cores. To properly utilize them",
    # Said of a limit the config sets on every run (conf/trainer/default.yaml's
    # limit_val_batches: 1.0, every batch), and of the GPU a single process was given: lines
    # an H200 run printed that ask nothing of the person reading them.
    "` was configured so ",
    "- CUDA_VISIBLE_DEVICES: [",
)


def tidy_lightning_logging() -> None:
    """Lightning's loggers print through their own handlers and then again through the root's:
    send them through the root only (the console and the run's log file), minus its adverts."""
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    # xfmr's manual step ends with the optimizer's update, so a checkpoint every N steps holds
    # the state after step N, as under automatic optimization: nothing to save before it.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    root = logging.getLogger()
    if not root.handlers:  # DDP workers: no Hydra logging configured
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    for handler in root.handlers:
        if not any(isinstance(f, _DropNoise) for f in handler.filters):
            handler.addFilter(_DropNoise())


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in _NOISE)
