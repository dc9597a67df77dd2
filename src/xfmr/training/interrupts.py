"""Stopping on a signal with a checkpoint, checkpoints on a clock, and a metrics log that goes on
where it was, so a run that is preempted (SIGTERM), stopped by a person (Ctrl-C) or killed
outright resumes where it was."""

from __future__ import annotations

import logging
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from xfmr.training.cadence import is_logging_step
from xfmr.training.checkpoint_saving import StateKeyOnce

log = logging.getLogger("xfmr")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class PeriodicCheckpoint(StateKeyOnce, ModelCheckpoint):
    """Lightning's ModelCheckpoint, every `every_n_train_steps` optimizer steps or every
    `every_minutes` minutes of training (one of the two), keeping the newest `save_top_k`.

    A run resumes from the newest of these and `last.ckpt`."""

    def __init__(self, *, every_minutes: float = 0, **kwargs: Any) -> None:
        if every_minutes and every_minutes > 0:
            kwargs["train_time_interval"] = timedelta(minutes=float(every_minutes))
        super().__init__(**kwargs)


class StopOnSignal(L.Callback):
    """SIGINT or SIGTERM ends the run after the training step under way (under DDP, after the
    next logging step, where the ranks agree on it): the state is saved
    to `checkpoint` (the loader's place in the epoch included) and the run stops with status
    `interrupted`. A second signal while that happens stops at once, as the default would.
    `requeue_signal` (SLURM's warning before the time limit, `xfmr.training.slurm`) stops the
    same way; `requeue_requested` then says the job is to be requeued.

    Lightning's own SIGTERM handling exits without a checkpoint; this one replaces it while
    training and puts the previous handlers back when training ends.

    A KeyboardInterrupt raised in the process itself (a notebook's interrupt that arrives outside
    training, `_thread.interrupt_main`, code that raises it) stops the same way, from where it
    was raised: Lightning hands it to `on_exception`, which saves the state once training has
    begun. Lightning then exits, which `xfmr.training.run.fit` turns back into a return."""

    def __init__(
        self, checkpoint: str | Path, requeue_signal: signal.Signals | None = None
    ) -> None:
        self.checkpoint = Path(checkpoint)
        self.requeue_signal = requeue_signal
        self.received: int | None = None
        self.stopped_at: int | None = None
        self.keyboard_interrupt = False  # a KeyboardInterrupt reached Lightning
        self._received_as: str | None = None
        self._previous: dict[int, Any] = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        extra = (self.requeue_signal,) if self.requeue_signal is not None else ()
        for signum in (*STOP_SIGNALS, *extra):
            try:
                self._previous[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread (e.g. a sweep worker thread): keep defaults
                pass

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.received is not None:  # a second Ctrl-C: stop now
            self._restore()
            signal.raise_signal(signum)
            return
        self.received = signum
        log.warning(
            "%s received: saving a checkpoint after this step, then stopping",
            signal.Signals(signum).name,
        )

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        stop = self.received is not None
        if trainer.world_size > 1:
            # Every rank stops at the same step: agreed at logging steps, the steps that may
            # wait for the device (xfmr.training.cadence).
            if not is_logging_step(trainer):
                return
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if not stop or self.stopped_at is not None:
            return
        trainer.save_checkpoint(self.checkpoint)
        self.stopped_at = trainer.global_step
        trainer.should_stop = True
        self._own_last(trainer)

    def _own_last(self, trainer: L.Trainer) -> None:
        """A ModelCheckpoint that saves the last state to the same file (save_last) and has
        not written it yet would, finding it there as the epoch ends, write last-v1.ckpt beside
        it: a second checkpoint of the same step, one resuming never reads. Told the file is
        its own, it writes the state there."""
        for callback in trainer.checkpoint_callbacks:
            if not isinstance(callback, ModelCheckpoint) or not callback.save_last:
                continue
            name = callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION
            if (
                callback.dirpath
                and (Path(callback.dirpath) / name).resolve() == self.checkpoint.resolve()
            ):
                callback.last_model_path = str(self.checkpoint)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception) -> None:
        if isinstance(exception, KeyboardInterrupt):
            self.keyboard_interrupt = True
            # The first interrupt saves the state; one while that happens (a second Ctrl-C)
            # stops at once.
            if self.received is None and self.stopped_at is None:
                self.received, self._received_as = signal.SIGINT, "KeyboardInterrupt"
                self._save_on_interrupt(trainer)
        self._restore()

    def _save_on_interrupt(self, trainer: L.Trainer) -> None:
        log.warning("KeyboardInterrupt: saving a checkpoint, then stopping")
        if trainer.global_step == 0:  # nothing trained yet: nothing to resume from
            self.stopped_at = 0
            return
        try:
            trainer.save_checkpoint(self.checkpoint)
        except Exception as e:  # the checkpoints on disk are still the last whole ones
            log.error("could not save %s: %s", self.checkpoint, e)
            return
        self.stopped_at = trainer.global_step

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    @property
    def requeue_requested(self) -> bool:
        """The requeue signal stopped the run, with its state saved."""
        requeue = self.requeue_signal is not None and self.received == self.requeue_signal
        return requeue and bool(self.stopped_at)

    @property
    def signal_name(self) -> str | None:
        if self.received is None:
            return None
        return self._received_as or signal.Signals(self.received).name


class ContinuedCsvLog(L.Callback):
    """A resumed run's metrics.csv goes on from the checkpoint's step.

    Lightning's CSV writer deletes an existing metrics.csv when it starts; the rows written
    before the run was stopped are read first (`xfmr.training.loggers.read_csv_rows`, before the loggers are made)
    and, once training has restored its step, those from before the checkpoint are written
    back ahead of the new ones (rows logged after the checkpoint are logged again)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        earlier = [row for row in self.rows if row.get("step", 0) < trainer.global_step]
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger) and earlier:
                logger.experiment.metrics[:0] = earlier
                logger.save()
        self.rows = []
