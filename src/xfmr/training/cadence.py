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


def log_at_step(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    """Send `metrics`, Python numbers read at a logging step, to the run's loggers at this step
    and to `trainer.callback_metrics`, as `LightningModule.log` would have. Its bookkeeping
    (a tensor made on the device for each number, an epoch aggregate, the batch size found)
    costs about a millisecond a call on a CPU, for values that are already numbers here."""
    if not metrics:
        return
    trainer.callback_metrics.update({k: torch.tensor(float(v)) for k, v in metrics.items()})
    if trainer.loggers:
        trainer._logger_connector.log_metrics(dict(metrics))
