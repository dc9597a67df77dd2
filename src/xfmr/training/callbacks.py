"""Callbacks that measure a run and keep what `results.json` reports, and the progress bar that
shows the run's steps."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from xfmr.training.cadence import is_logging_step, log_at_step, synchronize
from xfmr.training.throughput import Peak, TrainingFlops, mfu, resolve_peak


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


def _step_loss(trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any) -> Any:
    """The optimizer step's training loss: xfmr's module's, that of the whole step over every
    process (`XfmrModule.step_loss`); another module's, as Lightning passes it on."""
    step_loss = getattr(pl_module, "step_loss", None)
    if step_loss is not None:
        return step_loss()
    loss = outputs.get("loss") if isinstance(outputs, dict) else None
    # Lightning's copy, divided over accumulated batches
    return None if loss is None else loss * trainer.accumulate_grad_batches


class RunSummary(L.Callback):
    """Times training steps (validation excluded), shows tokens/s and model FLOPs utilisation
    (mfu), and tracks the best validation.

    Steps are timed in windows that end at logging steps (`xfmr.training.cadence`), where the
    device is synchronised: a window's time over its steps is what a step costs, the device's
    work included, however far the host ran ahead of it. The first step after training starts
    or a validation ends opens a window rather than being timed (it pays for compiling, the
    loader's start, a validation's tail); a validation closes one. At each window's end, the
    step's training loss (read back there), tok/s and mfu are logged (`log_at_step`) and kept
    in `shown` for the progress bar.

    Each validation adds a `history` entry: the step, the seconds spent training (`time_s`),
    the training tokens so far over all processes (`tokens`, the positions of `input_ids`
    that tok/s counts, padding included) and their training FLOPs (`flops`, at the FLOPs per
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
        self._step_tokens = 0  # of the optimizer step under way
        self.flops_per_token: float | None = None
        self.shown: dict[str, float] = {}  # the last window's tok/s and mfu, for the bar
        self.best: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
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

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        tokens = int(batch["input_ids"].numel()) * trainer.world_size  # shapes: no device read
        self._count(batch, tokens)
        self._step_tokens += tokens
        if trainer.fit_loop.epoch_loop._should_accumulate():
            return  # a micro-batch of gradient accumulation: the step ends with a later one
        # Steps, and their tokens, are optimizer steps: all of a step's micro-batches.
        self.tokens_per_step, self._step_tokens = self._step_tokens, 0
        if self._window_start is None:
            self._window_start = time.perf_counter()
            return
        self._window_steps += 1
        self._window_tokens += self.tokens_per_step
        if not is_logging_step(trainer):
            return
        if self._flops is not None:
            self.flops_per_token = self._flops.per_batch_token(batch)
        self._close_window(pl_module)
        loss = _step_loss(trainer, pl_module, outputs)
        if loss is not None:
            self.shown["train/loss"] = float(loss)
        log_at_step(trainer, self.shown)

    def _count(self, batch: Any, tokens: int) -> None:
        """Adds a (micro-)batch's tokens, as tokens/s counts them (every position of
        `input_ids`, padding included, on every process), and their training FLOPs at the
        batch's lengths (`TrainingFlops.per_batch_token`: arithmetic on shapes)."""
        if self._tokens_seen is not None:
            self._tokens_seen += tokens
        if self._flops is None or self._flops_seen is None:
            self._flops_seen = None  # an architecture without an estimate (rnn)
        else:
            self._flops_seen += self._flops.per_batch_token(batch) * tokens

    def _close_window(self, pl_module: L.LightningModule) -> None:
        """Wait for the device and time the window's steps: `shown` gets tok/s and mfu."""
        if self._window_start is None or not self._window_steps:
            return
        synchronize(pl_module.device)
        now = time.perf_counter()
        seconds = now - self._window_start
        self.windows.append((seconds * 1000.0 / self._window_steps, self._window_steps))
        tokens_per_s = self._window_tokens / seconds if seconds > 0 else None
        self.shown = {"tok/s": tokens_per_s} if tokens_per_s else {}
        utilisation = self.mfu(tokens_per_s, pl_module.trainer.world_size)
        if utilisation is not None:
            self.shown["mfu"] = utilisation
        self._window_start, self._window_steps, self._window_tokens = now, 0, 0

    @property
    def peak_flops(self) -> float | None:
        return self.peak.flops if self.peak is not None else None

    def mfu(self, tokens_per_s: float | None, world_size: int) -> float | None:
        """Model FLOPs utilisation at `tokens_per_s` over all `world_size` devices."""
        return mfu(tokens_per_s, self.flops_per_token, self.peak_flops, world_size=world_size)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_window(pl_module)
        self._window_start = None
        if self._segment_start is not None:
            self._train_seconds += time.perf_counter() - self._segment_start
            self._segment_start = None

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

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_window(pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        train_seconds = self._train_seconds
        self._segment_start = time.perf_counter()  # training goes on from here
        metrics = _scalar_metrics(trainer.callback_metrics)
        if self.monitor not in metrics:
            return
        entry = {
            "step": trainer.global_step,
            "time_s": round(train_seconds, 3),
            "tokens": self._tokens_seen,
            "flops": round(self._flops_seen) if self._flops_seen is not None else None,
            **{k: v for k, v in metrics.items() if k.startswith("val/")},
        }
        if self.history and self.history[-1]["step"] == entry["step"]:
            self.history[-1] = entry  # the same step validated again (a finished run resumed)
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
            "train_seconds": self._train_seconds,
            "tokens": self._tokens_seen,
            "flops": self._flops_seen,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best = state_dict.get("best", {})
        self.history = state_dict.get("history", [])
        self._train_seconds = state_dict.get("train_seconds", 0.0)
        # A checkpoint that did not count them: the counts from here on would start at its
        # step, not at 0, so the history's later entries have none.
        self._tokens_seen = state_dict.get("tokens")
        self._flops_seen = state_dict.get("flops")


class TextSample(L.Callback):
    """Prints (and logs to the run's log file) a text sample when training ends, so a person
    sees what the model learned. Skipped for models that are not causal LMs.

    `max_context` crops the context to what the model was trained on (the block size).
    """

    def __init__(
        self,
        *,
        prompt: str = "\n",
        max_new_tokens: int = 200,
        temperature: float = 0.8,
        top_k: int | None = 20,
        max_context: int | None = None,
        seed: int = 0,
    ) -> None:
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.max_context = max_context
        self.seed = seed
        self.tokenizer = None  # set by the run before fitting

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A sharded model (trainer=fsdp) runs a forward on every rank together: each samples
        # the same text (one seed), rank 0 prints it.
        sharded = getattr(pl_module, "device_mesh", None) is not None
        if (
            self.tokenizer is None
            or (trainer.global_rank != 0 and not sharded)
            or getattr(getattr(pl_module.model, "config", None), "arch", None)
            not in ("decoder", "rnn")
            or not hasattr(pl_module.model, "lm_head")  # a language model, not a classifier
        ):
            return
        import logging

        from xfmr.generation import GenerationConfig, sample_text

        ids = self.tokenizer.encode(self.prompt) or [0]
        config = GenerationConfig(  # temperature 0: the most likely token every step
            strategy="sample" if self.temperature > 0 else "greedy",
            temperature=self.temperature if self.temperature > 0 else 1.0,
            top_k=self.top_k,
            seed=self.seed,
        )
        out = sample_text(
            pl_module.model,
            ids,
            max_new_tokens=self.max_new_tokens,
            config=config,
            max_context=self.max_context,
        )
        if trainer.global_rank == 0:
            text = self.tokenizer.decode(out)
            logging.getLogger("xfmr").info("sample after step %d:\n%s", trainer.global_step, text)


# Between logging steps the bar's step count redraws at most this often: a pace a person reads,
# where a redraw every step costs the step loop more than its own bookkeeping.
REDRAW_SECONDS = 0.25


def training_figures(trainer: L.Trainer) -> dict[str, str]:
    """What a progress bar shows of training, as the run's RunSummary read it at the last
    logging step: the loss, tokens/s and MFU as a percentage."""
    summary = next((c for c in trainer.callbacks if isinstance(c, RunSummary)), None)
    figures = summary.shown if summary is not None else {}
    shown = {}
    if "train/loss" in figures:
        shown["train/loss"] = f"{figures['train/loss']:.4g}"
    if "tok/s" in figures:
        shown["tok/s"] = _thousands(figures["tok/s"])
    if "mfu" in figures:
        shown["mfu"] = f"{100 * figures['mfu']:.3g}%"  # 28.3%, and 0.131% for a tiny model
    return shown


def _thousands(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


class _Paced:
    """A progress bar's figures refreshed at logging steps, its redraws paced in between."""

    _figures: dict[str, str] = {}
    _drawn_at = 0.0

    def _due(self, trainer: L.Trainer) -> tuple[bool, bool]:
        """(read the figures now, redraw now)."""
        if is_logging_step(trainer):
            self._figures = training_figures(trainer)
            self._drawn_at = time.monotonic()
            return True, True
        now = time.monotonic()
        if now - self._drawn_at >= REDRAW_SECONDS:
            self._drawn_at = now
            return False, True
        return False, False


class StepProgressBar(_Paced, RichProgressBar):
    """Lightning's rich progress bar, counting optimizer steps toward `trainer.max_steps`.

    Training is step-based (`max_epochs: -1`), where Lightning's bar reads "Epoch 0/-2" and
    restarts its count every epoch. This one is a single bar for the whole run: "step", then
    `global_step/max_steps` (a resumed run starts at its restored step), steps/s and the logged
    metrics beside it. Validation bars are Lightning's, labelled with how much of the split
    they read (data with a budget, `data.val_batches`). Without `max_steps` (-1) the bar is
    Lightning's, per epoch.

    The loss, tok/s and MFU beside it are read at logging steps only (`training_figures`);
    in between, the step count moves and redraws at most every REDRAW_SECONDS. (Lightning's
    own bar reads its metrics back from the device at every redraw.)
    """

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return {**super().get_metrics(trainer, pl_module), **self._figures}

    @property
    def validation_description(self) -> str:
        """ "Validation", with how much of the split it reads when that is known."""
        trainer = getattr(self, "_trainer", None)
        coverage = validation_coverage(trainer) if trainer is not None else None
        if coverage is None:
            return "Validation"
        read, total = coverage["windows"], coverage["of"]
        if read == total:
            return f"Validation (all {total:,} windows)"
        return f"Validation ({read:,} of {total:,} windows, {read / total:.1%})"

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.max_steps <= 0:
            super().on_train_epoch_start(trainer, pl_module)
            return
        self._show_step(trainer)
        self.refresh()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        if trainer.max_steps <= 0:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        read, redraw = self._due(trainer)
        self._show_step(trainer, redraw=False)
        if read:
            self._update_metrics(trainer, pl_module)
        if redraw:
            self.refresh()

    def _show_step(self, trainer: L.Trainer, *, redraw: bool = True) -> None:
        if self.is_disabled or self.progress is None:
            return
        if self.train_progress_bar_id is None:
            # Padded like Lightning's epoch label.
            label = f"{'step':{len('Validation')}}"
            self.train_progress_bar_id = self._add_task(trainer.max_steps, label)
            # Started at the restored step, so steps/s and time left count this run's steps only.
            self.progress.reset(self.train_progress_bar_id, completed=trainer.global_step)
        if redraw:
            self._update(self.train_progress_bar_id, trainer.global_step)
        else:
            self.progress.update(self.train_progress_bar_id, completed=trainer.global_step)


class NotebookStepProgressBar(_Paced, TQDMProgressBar):
    """StepProgressBar's one bar for the whole run (`global_step/max_steps`, a resumed run from
    its restored step), drawn by tqdm, which renders in Jupyter: a widget where ipywidgets is
    installed, else a line of text the notebook redraws in place. Rich's live display needs
    ipywidgets there and shows nothing without it. `xfmr.train` uses it in a notebook."""

    def init_train_tqdm(self) -> Any:
        bar = super().init_train_tqdm()
        bar.set_description("step")
        return bar

    # One bar: the step bar shows val/loss when a validation ends. Validation's nested bars move
    # the cursor up and down, which a notebook's output does not follow, so each left a line.
    def init_sanity_tqdm(self) -> Any:
        return Tqdm(disable=True)

    def init_validation_tqdm(self) -> Any:
        return Tqdm(disable=True)

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.max_steps <= 0:
            super().on_train_epoch_start(trainer, *args)
            return
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:  # once: later epochs go on counting steps
            bar.reset(total=trainer.max_steps)
            bar.initial = trainer.global_step
            bar.n = trainer.global_step
            bar.set_description("step")
            bar.refresh()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        if trainer.max_steps <= 0:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar = self.train_progress_bar
        if bar is None:
            return
        read, redraw = self._due(trainer)
        bar.n = trainer.global_step
        if read:
            bar.set_postfix(
                {**self.get_metrics(trainer, pl_module), **self._figures}, refresh=False
            )
        if redraw:
            bar.refresh()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.max_steps <= 0:
            super().on_train_epoch_end(trainer, pl_module)
