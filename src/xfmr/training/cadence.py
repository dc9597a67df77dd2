"""Which training steps may read the device.

A training step queues work on the device and returns; reading a tensor back (`item`, `float`,
`bool`, `tolist`, `cpu`) or logging a Python number makes the host wait for everything queued
before it, so on a GPU the next step's work is not queued while this one runs. xfmr reads only
at logging steps (every `trainer.log_every_n_steps` optimizer steps, and the run's last step):
the loss and throughput are logged there, the progress bar's figures refreshed and the
non-finite guard's record read. Everything else waits for them.
"""

from __future__ import annotations

import lightning as L
import torch


def is_logging_step(trainer: L.Trainer) -> bool:
    """True during the optimizer step whose metrics Lightning sends to the loggers
    (`trainer.log_every_n_steps`), and during the run's last step: the steps at which a read of
    the device is allowed. False on the micro-batches of gradient accumulation before the one
    that steps, as Lightning logs only that one."""
    loop = trainer.fit_loop.epoch_loop
    if loop._should_accumulate():
        return False
    if trainer._logger_connector.should_update_logs:
        return True
    # `_batches_that_stepped` counts the optimizer steps before this one (as Lightning's test).
    return 0 < trainer.max_steps <= loop._batches_that_stepped + 1


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (where a timing must include it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
