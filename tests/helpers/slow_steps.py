"""A callback that makes every training step a tenth of a second longer, so that a signal a test
sends arrives while the run still trains (`+callbacks.slow._target_=helpers.slow_steps.SlowSteps`
in a process whose PYTHONPATH is `helpers.helpers_env()`'s)."""

from __future__ import annotations

import time

import lightning as L


class SlowSteps(L.Callback):
    def __init__(self, seconds: float = 0.1) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: object) -> None:
        time.sleep(self.seconds)
