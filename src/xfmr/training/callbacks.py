"""Callbacks that measure a run and keep what `results.json` reports."""

from __future__ import annotations

import statistics
import time
from typing import Any

import lightning as L


def _scalar_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


class RunSummary(L.Callback):
    """Times training steps (validation excluded), shows tokens/s, and tracks the best validation.

    A step's time is the interval between the ends of two consecutive training batches, so it
    includes data loading, forward, backward, optimizer and logging; intervals that contain a
    validation loop are dropped.
    """

    def __init__(self, monitor: str = "val/loss", mode: str = "min") -> None:
        self.monitor = monitor
        self.mode = mode
        self.step_ms: list[float] = []
        self.tokens_per_step = 0
        self.best: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self._last_end: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        self.tokens_per_step = int(batch["input_ids"].numel()) * trainer.world_size
        if self._last_end is not None:
            elapsed = (now - self._last_end) * 1000.0
            self.step_ms.append(elapsed)
            pl_module.log("tok/s", self.tokens_per_step / (elapsed / 1000.0), prog_bar=True, on_step=True, on_epoch=False, rank_zero_only=True)
        self._last_end = now

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_end = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_end = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = _scalar_metrics(trainer.callback_metrics)
        if self.monitor not in metrics:
            return
        entry = {"step": trainer.global_step, **{k: v for k, v in metrics.items() if k.startswith("val/")}}
        self.history.append(entry)
        value = metrics[self.monitor]
        better = (value < self.best.get(self.monitor, float("inf"))) if self.mode == "min" else (
            value > self.best.get(self.monitor, float("-inf"))
        )
        if better:
            self.best = entry

    @property
    def ms_per_step(self) -> float | None:
        return statistics.median(self.step_ms) if self.step_ms else None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best = state_dict.get("best", {})
        self.history = state_dict.get("history", [])
