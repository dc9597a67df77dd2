"""What the data modules share: refusing a file with no usable rows, and batching the encoded
training and validation examples into DataLoaders."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from xfmr.data.formats.bad_rows import BadRows
from xfmr.data.loading import device_loading
from xfmr.data.order import (
    SeededCollate,
    TrainingLoader,
    ValidationReads,
    WindowedLoader,
    run_seed,
)
from xfmr.data.settings import AUTO_WORKERS, check_num_workers
from xfmr.errors import UserError

log = logging.getLogger("xfmr")

Row = TypeVar("Row")


def usable_rows(rows: list[Row], bad_rows: BadRows, *, where: str, noun: str = "rows") -> list[Row]:
    """`rows` as read from `where`, once the bad rows skipped on the way are logged; a UserError
    if none is left."""
    if len(bad_rows):
        log.warning("%s", bad_rows.summary())
    if not rows:
        raise UserError(f"data: {where} has no usable {noun}")
    return rows


def require_positive(**values: Any) -> None:
    """Each `data.KEY=VALUE` is a whole number of at least one."""
    for key, value in values.items():
        if int(value) < 1:
            raise UserError(f"data.{key}={value} must be a positive integer")


def cache_setting(cache: bool, cache_dir: str | None) -> bool:
    """`data.cache`, refused when it has nowhere to go."""
    if cache and not cache_dir:
        raise UserError(
            "data.cache_dir is not set: give a directory for the token cache, "
            "or set data.cache=false"
        )
    return bool(cache)


def make_loader(
    dataset: Dataset | Sequence[Any],
    *,
    batch_size: int,
    shuffle: bool,
    num_workers: int,
    collate_fn: Callable[[list[Any]], dict] | None,
    drop_last: bool = False,
    pin_memory: bool = False,
    window: int | None = None,
) -> DataLoader:
    """A DataLoader whose workers, if any, live as long as it does (no restart every epoch).
    Training batches (`window`: the batches of one optimizer step, gradient accumulation) come
    a window at a time, each a list of batches that carry their window's counts; shuffled ones
    from a `TrainingLoader`, which resumes mid-epoch. `window=None` (validation): one batch at a
    time, each drawing its random numbers (masks, spans, truncations) from the run's seed and
    its examples' indices, in a worker or not (`ValidationReads`, `SeededCollate`; a stream's,
    which has no indices, from the generators as they are). `num_workers` and `pin_memory`
    come from `xfmr.data.loading.device_loading`."""
    if shuffle:
        return TrainingLoader(
            dataset,  # type: ignore[arg-type]
            batch_size=batch_size,
            collate_fn=collate_fn,
            drop_last=drop_last,
            num_workers=num_workers,
            pin_memory=pin_memory,
            accumulate=window or 1,
        )
    own: dict[str, Any] = {}
    if window is None and not isinstance(dataset, IterableDataset):
        # Validation: each batch's random numbers from (seed, its examples' indices) alone.
        # The loader's own draw (its workers' base seed) from a generator of its own.
        dataset = ValidationReads(dataset, seed=run_seed())
        collate_fn = SeededCollate(collate_fn)
        own = {"generator": torch.Generator().manual_seed(run_seed())}
    return (DataLoader if window is None else WindowedLoader)(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        **(own if window is None else {"accumulate": window}),
    )


class ExamplesDataModule(L.LightningDataModule):
    """A data module whose `attach` encodes the examples into `train_set` and `val_set` and
    keeps the objective's `collate_fn` and the `window` of training batches an optimizer step
    takes: training batches are shuffled and handed out a window at a time, validation batches
    keep the examples' order. A module whose splits are held elsewhere overrides the two loaders.

    Args:
        batch_size: examples per batch (per process under DDP).
        num_workers: DataLoader worker processes, or "auto": chosen for the device the run
            trains on when the loaders are built (`xfmr.data.loading`).
        packing: each batch's examples share rows (`xfmr.objectives.packing`), for the
            objectives that pack; the run wraps the objective's collate accordingly.
    """

    train_set: Dataset | Sequence[Any] | None
    val_set: Dataset | Sequence[Any] | None

    def __init__(
        self, *, batch_size: int, num_workers: int | str = AUTO_WORKERS, packing: bool = False
    ) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.packing = packing
        self.num_workers = check_num_workers(num_workers)
        self.collate_fn: Callable[[list[Any]], dict] | None = None
        self.window = 1  # training batches per optimizer step, as `attach` is given it

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def _loader(self, dataset: Dataset | Sequence[Any] | None, *, shuffle: bool) -> DataLoader:
        loading = device_loading(self.trainer, self.num_workers, training=shuffle)
        return make_loader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=loading.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=loading.pin_memory,
            window=self.window if shuffle else None,
        )
