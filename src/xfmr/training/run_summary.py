"""The callback that measures a run's training steps and keeps what `results.json` reports of
them: time per step, tokens/s and MFU (of the training steps, and over training's wall time),
and the validations' history."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L

from xfmr.training.cadence import is_logging_step, log_at_step, synchronize
from xfmr.training.throughput import Peak, TrainingFlops, mfu, resolve_peak

# What the loggers and the progress bar get at each logging step: the training steps' tokens/s
# and MFU since the previous one (docs/training.md, "Throughput", says what each figure counts).
TRAIN_TOKENS_PER_S = "train/tokens_per_s"
TRAIN_MFU = "train/mfu"
LOGGED_SPEEDS = (TRAIN_TOKENS_PER_S, TRAIN_MFU)


def validation_coverage(trainer: L.Trainer) -> dict[str, int] | None:
    """How much of the validation split a validation reads (`val_coverage` of data that has a
    validation budget: windows read, of how many, tokens), as far as Lightning's loop reads it;
    None for data that does not say."""
    read = getattr(trainer.datamodule, "val_coverage", None)
    if read is None:
        return None
    counts = trainer.num_val_batches  # per process, after trainer.limit_val_batches
    if counts and math.isfinite(counts[0]):
        return read(batches=int(counts[0]) * trainer.world_size)
    return read()


def _scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _step_loss(pl_module: L.LightningModule, outputs: Any) -> Any:
    """The optimizer step's training loss: xfmr's module's, that of the whole step over every
    process (`XfmrModule.step_loss`); another module's, as its training step returned it."""
    step_loss = getattr(pl_module, "step_loss", None)
    if step_loss is not None:
        return step_loss()
    return outputs.get("loss") if isinstance(outputs, dict) else None


def _added(total: float | None, more: float | None) -> float | None:
    """A running count; None, once a part of it is not known, stays None."""
    return None if total is None or more is None else total + more


class RunSummary(L.Callback):
    """Times training steps (validation excluded), shows tokens/s and model FLOPs utilisation
    (mfu), times training as a whole, and tracks the best validation.

    A training batch is one optimizer step's window of micro-batches (`xfmr.data.order`): a
    step's tokens and FLOPs are those of all its micro-batches. Steps are timed in windows that
    end at logging steps (`xfmr.training.cadence`), where the
    device is synchronised: a window's time over its steps is what a step costs, the device's
    work included, however far the host ran ahead of it. The first step after training starts
    or a validation ends opens a window rather than being timed (it pays for compiling, the
    loader's start, a validation's tail); a validation closes one. At each window's end, the
    step's training loss (read back there) and the window's `train/tokens_per_s` and
    `train/mfu` are logged (`log_at_step`) and kept in `shown` for the progress bar.
    results.json's `train_tokens_per_s` and `train_mfu` are the median step's (`speeds`), its
    `wall_tokens_per_s` and `wall_mfu` those of the whole of training, from its start to its end,
    validation, checkpoints and logging included.

    Each validation adds a `history` entry: the step, the seconds spent training (`time_s`),
    the training tokens so far over all processes (`tokens`, the positions of `input_ids`
    that tokens/s counts, padding included) and their training FLOPs (`flops`, at the FLOPs per
    token mfu uses, each batch at its own lengths), and the `val/` metrics. The counts are in
    the callback's state, so a resumed run goes on from its checkpoint's.

    Args:
        monitor, mode: the validation metric that decides the best entry, and its direction.
        peak_tflops: one device's peak TFLOP/s (`throughput.peak_tflops`), the denominator
            of mfu; None takes the device's (`resolve_peak`) when training starts: a GPU's
            datasheet figure for the precision, a CPU's measured.
        cache_dir: where measured peaks are kept; None measures every run.
    """

    def __init__(
        self,
        monitor: str = "val/loss",
        mode: str = "min",
        *,
        peak_tflops: float | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.monitor = monitor
        self.mode = mode
        self.peak_tflops = peak_tflops
        self.peak: Peak | None = None
        self.cache_dir = cache_dir
        self.windows: list[tuple[float, int]] = []  # (ms per step, steps) of each window
        self.tokens_per_step = 0  # of the last optimizer step, all its micro-batches
        self.flops_per_token: float | None = None
        self.shown: dict[str, float] = {}  # the last window's LOGGED_SPEEDS, for the bar
        self.best: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.scores: dict[str, float] = {}  # the latest of each `add_scores` metric
        self._flops: TrainingFlops | None = None
        self._window_start: float | None = None
        self._window_steps = 0
        self._window_tokens = 0
        # Seconds spent training, validation excluded, up to each history entry (`time_s`),
        # and the training tokens and FLOPs so far (`tokens`, `flops`): runs of different
        # speeds and sizes are compared at equal time, data or compute with them. None: not
        # known (a run resumed from a checkpoint that did not count them).
        self._train_seconds = 0.0
        self._segment_start: float | None = None
        self._tokens_seen: int | None = 0
        self._flops_seen: float | None = 0.0
        # This fit's wall time (perf_counter at its start, seconds when it ended), tokens and
        # FLOPs: a resumed run's figures are its own fit's.
        self._fit_start: float | None = None
        self._fit_seconds: float | None = None
        self._fit_tokens = 0
        self._fit_flops: float | None = 0.0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        self.tokens_per_step = 0  # all of the step's micro-batches, on every process
        for micro_batch in batch:
            tokens = int(micro_batch["input_ids"].numel()) * trainer.world_size  # no device read
            self._count(micro_batch, tokens)
            self.tokens_per_step += tokens
        if self._window_start is None:
            self._window_start = time.perf_counter()
            return
        self._window_steps += 1
        self._window_tokens += self.tokens_per_step
        if not is_logging_step(trainer):
            return
        if self._flops is not None:
            self.flops_per_token = self._flops.per_batch_token(batch[-1])
        self._close_window(pl_module)
        loss = _step_loss(pl_module, outputs)
        if loss is not None:
            self.shown["train/loss"] = float(loss)
        # Auxiliary terms (PaLM's z-loss), the parts of train/loss that are not the objective's
        # loss terms (`XfmrModule.step_terms`).
        for term, value in getattr(pl_module, "step_terms", dict)().items():
            self.shown[f"train/{term}"] = float(value)
        log_at_step(trainer, self.shown)

    def _count(self, batch: Any, tokens: int) -> None:
        """Adds a (micro-)batch's tokens, as tokens/s counts them (every position of
        `input_ids`, padding included, on every process), and their training FLOPs at the
        batch's lengths (`TrainingFlops.per_batch_token`: arithmetic on shapes; None for an
        architecture without an estimate, rnn)."""
        flops = self._flops.per_batch_token(batch) * tokens if self._flops is not None else None
        self._tokens_seen = _added(self._tokens_seen, tokens)
        self._flops_seen = _added(self._flops_seen, flops)
        self._fit_tokens += tokens
        self._fit_flops = _added(self._fit_flops, flops)

    def _close_window(self, pl_module: L.LightningModule) -> None:
        """Wait for the device and time the window's steps: `shown` gets LOGGED_SPEEDS."""
        if self._window_start is None or not self._window_steps:
            return
        synchronize(pl_module.device)
        now = time.perf_counter()
        seconds = now - self._window_start
        self.windows.append((seconds * 1000.0 / self._window_steps, self._window_steps))
        tokens_per_s = self._window_tokens / seconds if seconds > 0 else None
        self.shown = {TRAIN_TOKENS_PER_S: tokens_per_s} if tokens_per_s else {}
        utilisation = self.mfu(tokens_per_s, pl_module.trainer.world_size)
        if utilisation is not None:
            self.shown[TRAIN_MFU] = utilisation
        self._window_start, self._window_steps, self._window_tokens = now, 0, 0

    @property
    def peak_flops(self) -> float | None:
        return self.peak.flops if self.peak is not None else None

    def mfu(self, tokens_per_s: float | None, world_size: int) -> float | None:
        """Model FLOPs utilisation at `tokens_per_s` over all `world_size` devices."""
        return mfu(tokens_per_s, self.flops_per_token, self.peak_flops, world_size=world_size)

    def speeds(self, world_size: int) -> dict[str, float | None]:
        """results.json's throughput, each figure once: `train_tokens_per_s` and `train_mfu`
        at the median training step (`ms_per_step`, validation excluded), `wall_tokens_per_s`
        and `wall_mfu` over this fit's wall time (validation, checkpoints and logging
        included), at the FLOPs per token its batches averaged."""
        ms = self.ms_per_step
        train = self.tokens_per_step / (ms / 1000.0) if ms else None
        seconds = self._fit_seconds
        if seconds is None and self._fit_start is not None:  # training did not reach its end
            seconds = time.perf_counter() - self._fit_start
        wall = self._fit_tokens / seconds if seconds and self._fit_tokens else None
        per_token = self._fit_flops / self._fit_tokens if wall and self._fit_flops else None
        return {
            "train_tokens_per_s": train,
            "train_mfu": self.mfu(train, world_size),
            "wall_tokens_per_s": wall,
            "wall_mfu": mfu(wall, per_token, self.peak_flops, world_size=world_size),
        }

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._pause(pl_module)

    def _pause(self, pl_module: L.LightningModule) -> None:
        """Training stops here: the open window is closed and its seconds counted."""
        self._close_window(pl_module)
        self._window_start = None
        if self._segment_start is not None:
            self._train_seconds += time.perf_counter() - self._segment_start
            self._segment_start = None

    @contextmanager
    def not_training(self, pl_module: L.LightningModule) -> Iterator[None]:
        """Work between training steps that is not training (an evaluation): its time is left
        out of the steps' timing and of `time_s`, as a validation's is. It waits for the
        device, so it belongs where a step may read it."""
        self._pause(pl_module)
        try:
            yield
        finally:
            self._segment_start = time.perf_counter()

    def add_scores(self, trainer: L.Trainer, scores: Mapping[str, float]) -> None:
        """Scores measured after the step just taken, outside validation: into the history
        entry of this step (made here, with where it was taken, if none is), and `scores`."""
        if not self.history or self.history[-1]["step"] != trainer.global_step:
            self.history.append(self._entry(trainer.global_step, self._train_seconds))
        self.history[-1].update(scores)
        self.scores.update(scores)

    def _entry(self, step: int, train_seconds: float) -> dict[str, Any]:
        """A history entry's first fields: where in training it was taken."""
        return {
            "step": step,
            "time_s": round(train_seconds, 3),
            "tokens": self._tokens_seen,
            "flops": round(self._flops_seen) if self._flops_seen is not None else None,
        }

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._window_start = None
        self._flops = TrainingFlops.of(pl_module.model)
        # Rank 0 alone reports mfu; other ranks measuring at once would share the device.
        if self.peak is None and trainer.global_rank == 0:
            self.peak = resolve_peak(
                pl_module.device,
                trainer.precision,
                given_tflops=self.peak_tflops,
                cache_dir=self.cache_dir,
            )
        self._segment_start = time.perf_counter()  # measuring the peak is no training
        self._fit_start, self._fit_seconds = self._segment_start, None
        self._fit_tokens, self._fit_flops = 0, 0.0

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_window(pl_module)
        synchronize(pl_module.device)
        if self._fit_start is not None:
            self._fit_seconds = time.perf_counter() - self._fit_start

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        train_seconds = self._train_seconds
        self._segment_start = time.perf_counter()  # training goes on from here
        metrics = _scalar_metrics(trainer.callback_metrics)
        if self.monitor not in metrics:
            return
        entry = {
            **self._entry(trainer.global_step, train_seconds),
            **{k: v for k, v in metrics.items() if k.startswith("val/")},
        }
        if self.history and self.history[-1]["step"] == entry["step"]:
            # The step's scores (add_scores), or the same step validated again (a finished
            # run resumed): one entry, this validation's figures in it.
            entry = self.history[-1] = {**self.history[-1], **entry}
        else:
            self.history.append(entry)
        value = metrics[self.monitor]
        better = (
            (value < self.best.get(self.monitor, float("inf")))
            if self.mode == "min"
            else (value > self.best.get(self.monitor, float("-inf")))
        )
        if better:
            self.best = entry

    @property
    def ms_per_step(self) -> float | None:
        """The median step's time, each step timed as its window's mean."""
        if not self.windows:
            return None
        ordered = sorted(self.windows)
        half, seen = sum(steps for _, steps in ordered) / 2, 0
        for ms, steps in ordered:
            seen += steps
            if seen >= half:
                return ms
        return ordered[-1][0]

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "history": self.history,
            "scores": self.scores,
            "train_seconds": self._train_seconds,
            "tokens": self._tokens_seen,
            "flops": self._flops_seen,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best = state_dict.get("best", {})
        self.history = state_dict.get("history", [])
        self.scores = state_dict.get("scores", {})
        self._train_seconds = state_dict.get("train_seconds", 0.0)
        # A checkpoint that did not count them: the counts from here on would start at its
        # step, not at 0, so the history's later entries have none.
        self._tokens_seen = state_dict.get("tokens")
        self._flops_seen = state_dict.get("flops")
