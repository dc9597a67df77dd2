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


def is_logging_step(trainer: L.Trainer, step: int | None = None) -> bool:
    """True for an optimizer step whose metrics Lightning sends to the loggers (every
    `trainer.log_every_n_steps` steps, and the step at which the run is told to stop), and for
    the run's last step: the steps at which a read of the device is allowed.

    `step` counts optimizer steps from 1: by default the one just taken, `trainer.global_step`
    once the optimizer has stepped (during the training step's update and after it); before it,
    ask for `trainer.global_step + 1`. Each training batch is one optimizer step's window
    (`xfmr.data.order`), so this is the test Lightning makes after each batch (its logger
    connector's `should_update_logs`, with the steps it counts in `global_step`)."""
    step = trainer.global_step if step is None else step
    every = trainer.log_every_n_steps
    if every and (step % every == 0 or trainer.should_stop):
        return True
    return 0 < trainer.max_steps <= step


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (where a timing must include it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def log_at_step(trainer: L.Trainer, metrics: dict[str, float]) -> None:
    """Send `metrics`, Python numbers read at a logging step, to the run's loggers at this step
    and to `trainer.callback_metrics`, as `LightningModule.log` would have: each logger's
    `log_metrics` at the step Lightning gives a step's metrics (the steps before it), with the
    epoch beside them. `LightningModule.log`'s bookkeeping (a tensor made on the device for each
    number, an epoch aggregate, the batch size found) costs about a millisecond a call on a CPU,
    for values that are already numbers here."""
    if not metrics:
        return
    trainer.callback_metrics.update({k: torch.tensor(float(v)) for k, v in metrics.items()})
    scalars = dict(metrics)
    scalars.setdefault("epoch", trainer.current_epoch)
    for logger in trainer.loggers:
        logger.log_metrics(scalars, step=trainer.global_step - 1)
        logger.save()
