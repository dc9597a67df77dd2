"""Lightning callbacks that make a sweep's job fail the way real jobs do, mid-training: an
exception, or a SIGKILL (what the kernel's out-of-memory killer sends). A scenario config adds
one with `callbacks: {fault: {_target_: helpers.sweep_faults.Raise}}`."""

from __future__ import annotations

import os
import signal

import lightning as L


class Raise(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= 2:
            raise RuntimeError("injected failure")


class Kill(L.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= 2:
            os.kill(os.getpid(), signal.SIGKILL)
