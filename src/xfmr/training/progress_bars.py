"""Progress bars that count a run's optimizer steps toward `trainer.max_steps`, their figures
(loss, the training steps' tokens/s and MFU) read at logging steps only."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from xfmr.training.cadence import is_logging_step
from xfmr.training.run_summary import (
    TRAIN_MFU,
    TRAIN_TOKENS_PER_S,
    RunSummary,
    validation_coverage,
)

# Between logging steps the bar's step count redraws at most this often: a pace a person reads,
# where a redraw every step costs the step loop more than its own bookkeeping.
REDRAW_SECONDS = 0.25


def training_figures(trainer: L.Trainer) -> dict[str, str]:
    """What a progress bar shows of training, as the run's RunSummary read it at the last
    logging step and under the names the loggers have: the loss, and the training steps'
    tokens/s and MFU (as a percentage) since the logging step before."""
    summary = next((c for c in trainer.callbacks if isinstance(c, RunSummary)), None)
    return shown_figures(summary.shown if summary is not None else {})


def shown_figures(figures: Mapping[str, float]) -> dict[str, str]:
    """Logged figures as a progress bar shows them, under their logged names."""
    shown = {}
    if "train/loss" in figures:
        shown["train/loss"] = f"{figures['train/loss']:.4g}"
    if TRAIN_TOKENS_PER_S in figures:
        shown[TRAIN_TOKENS_PER_S] = _thousands(figures[TRAIN_TOKENS_PER_S])
    if TRAIN_MFU in figures:
        shown[TRAIN_MFU] = f"{100 * figures[TRAIN_MFU]:.3g}%"  # 28.3%; 0.131% for a tiny model
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

    The loss, tokens/s and MFU beside it are read at logging steps only (`training_figures`);
    in between, the step count moves and redraws at most every REDRAW_SECONDS. (Lightning's
    own bar reads its metrics back from the device at every redraw.)
    """

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return {**super().get_metrics(trainer, pl_module), **self._figures}

    @property
    def validation_description(self) -> str:
        """ "Validation", with how much of the split it reads when that is known."""
        coverage = validation_coverage(self.trainer)  # asked once the bar is set up
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
