"""How batches reach the device a run trains on: who makes them (loader worker processes or the
training process), and whether they are pinned, decided when the loaders are built.

nanoGPT copies each batch with `x.pin_memory().to(device, non_blocking=True)`. Lightning's
`batch_to_device` already copies non-blocking to CUDA, but a copy from pageable memory waits
all the same, so batches bound for a CUDA device are pinned (by the loader, in its own thread).
On a CPU pinning would only cost a copy.

`data.num_workers=auto` makes batches in the training process on a CPU, whose cores train the
model, and in a few workers on a CUDA device, where the training process's host time goes to
queueing kernels. Lightning's advice to raise `num_workers` is then filtered for that loader,
and one INFO line gives the number and the reason; a number the user gave is kept as given,
and Lightning's advice with it.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from xfmr.data.config import MAX_AUTO_WORKERS, auto_workers
from xfmr.data.settings import AUTO_WORKERS, ChosenWorkers
from xfmr.devices import cpu_cores

if TYPE_CHECKING:
    import lightning as L

log = logging.getLogger("xfmr")

# Lightning's warning (lightning.pytorch.trainer.connectors.data_connector._worker_check).
_FEW_WORKERS = "The '{}' does not have many workers"


@dataclass(frozen=True)
class Loading:
    """A loader's `num_workers` and `pin_memory`."""

    num_workers: int
    pin_memory: bool


def device_loading(
    trainer: L.Trainer | None, num_workers: int | str, *, training: bool, most: int | None = None
) -> Loading:
    """The loading of the training (`training`) or validation loader for the device `trainer`
    trains on (no trainer: a CPU). `most` caps an automatic count (a stream's shards: a worker
    beyond them would have nothing to read)."""
    device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
    pin_memory = device.type == "cuda"
    chosen = num_workers == AUTO_WORKERS or isinstance(num_workers, ChosenWorkers)
    _quiet_few_workers("train_dataloader" if training else "val_dataloader", quiet=chosen)
    if not chosen:
        return Loading(int(num_workers), pin_memory)
    cpus, local = cpu_cores(), trainer.num_devices if trainer is not None else 1
    workers = (
        int(num_workers)  # chosen when the run's config was read
        if isinstance(num_workers, ChosenWorkers)
        else auto_workers(device.type, cpus=cpus, local_world_size=local)
    )
    shards = most if most is not None and most < workers else None  # the stream's, when fewer
    if shards is not None:
        workers = shards
    if training:
        line = auto_workers_line(workers, device, cpus=cpus, local_world_size=local, shards=shards)
        log.info("%s", line)
    return Loading(workers, pin_memory)


def auto_workers_line(
    workers: int,
    device: torch.device,
    *,
    cpus: int,
    local_world_size: int,
    shards: int | None = None,
) -> str:
    """The INFO line that says what `data.num_workers=auto` chose, and why (`shards`: the
    stream's, when they were fewer)."""
    if device.type == "cpu":
        return (
            "data: batches made in the training process (data.num_workers=auto: 0 on a CPU, "
            "whose cores train the model)"
        )
    if device.type != "cuda":
        return f"data: batches made in the training process (data.num_workers=auto: 0 on {device})"
    made = {0: "batches made in the training process", 1: "1 loader worker"}.get(
        workers, f"{workers} loader workers"
    )
    cap = f", and at most the stream's {shards} shard(s)" if shards else ""
    return (
        f"data: {made} on {device} (data.num_workers=auto: {cpus} CPUs for "
        f"{local_world_size} device(s), less one for the training process, at most "
        f"{MAX_AUTO_WORKERS}{cap})"
    )


def _quiet_few_workers(loader: str, *, quiet: bool) -> None:
    """Filter Lightning's advice to raise `loader`'s num_workers while xfmr chooses the number
    (the INFO line says why), and take that filter out again when the user gives one."""
    message = re.escape(_FEW_WORKERS.format(loader))
    for entry in [entry for entry in warnings.filters if _is_filter(entry, message)]:
        warnings.filters.remove(entry)
    if quiet:
        warnings.filterwarnings("ignore", message=message, category=PossibleUserWarning)


def _is_filter(entry: tuple, message: str) -> bool:
    action, pattern, category = entry[:3]
    return (
        action == "ignore"
        and category is PossibleUserWarning
        and getattr(pattern, "pattern", None) == message
    )
