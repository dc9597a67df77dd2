"""Plain-text corpora cut into blocks of `block_size` tokens for language modelling."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from xfmr.data.base import make_loader
from xfmr.data.files import read_utf8, text_files
from xfmr.errors import UserError
from xfmr.text.tokenizers import TextTokenizer


class BlockDataset(Dataset):
    """Windows of `length` tokens starting every `stride` tokens of one long token stream."""

    def __init__(self, ids: torch.Tensor, *, length: int, stride: int) -> None:
        self.ids = ids
        self.length = length
        self.stride = stride
        self.count = max(0, (len(ids) - length) // stride + 1)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor:
        start = index * self.stride
        return self.ids[start : start + self.length]


class TextCorpusDataModule(L.LightningDataModule):
    """One or more UTF-8 text files, concatenated, split by fraction into train and validation.

    Args:
        path: a file, a directory (its `*.txt` files, sorted) or a list of either.
        val_fraction: the tail fraction of the characters used for validation (nanoGPT: 0.1).
        block_size: tokens the model sees per example; examples hold `block_size + 1` tokens
            so the objective can shift them into inputs and targets.
        batch_size: examples per batch (per process under DDP).
        train_stride: distance between training windows; 1 takes every offset, as nanoGPT's
            random sampling does; validation windows never overlap.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        *,
        path: str | Sequence[str] | None = None,
        val_fraction: float = 0.1,
        block_size: int = 64,
        batch_size: int = 12,
        train_stride: int = 1,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 < val_fraction < 1.0:
            raise UserError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
        for key, value in (
            ("block_size", block_size),
            ("batch_size", batch_size),
            ("train_stride", train_stride),
        ):
            if int(value) < 1:
                raise UserError(f"data.{key}={value} must be a positive integer")
        self.path = path
        self.val_fraction = val_fraction
        self.block_size = block_size
        self.batch_size = batch_size
        self.train_stride = train_stride
        self.num_workers = num_workers
        self._split: tuple[str, str] | None = None
        self.train_ids: torch.Tensor | None = None
        self.val_ids: torch.Tensor | None = None
        self.collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]] | None = None

    # -- text ------------------------------------------------------------------------------
    def files(self) -> list[Path]:
        return text_files(self.path)

    def read_text(self) -> str:
        parts = []
        for f in self.files():
            text = read_utf8(f)
            if not text.strip():
                raise UserError(f"data.path file {str(f)!r} is empty")
            parts.append(text)
        return "".join(parts)

    def split_text(self) -> tuple[str, str]:
        """(train, val) text; the tokenizer is trained on the first only."""
        if self._split is None:
            text = self.read_text()
            cut = int(len(text) * (1.0 - self.val_fraction))
            self._split = (text[:cut], text[cut:])
        return self._split

    # -- tokens ----------------------------------------------------------------------------
    def attach(
        self, tokenizer: TextTokenizer, collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]]
    ) -> None:
        """Encode both splits with `tokenizer`; batches are made by the objective's `collate_fn`."""
        train, val = self.split_text()
        self.train_ids = torch.tensor(tokenizer.encode(train), dtype=torch.long)
        self.val_ids = torch.tensor(tokenizer.encode(val), dtype=torch.long)
        self.collate_fn = collate_fn
        need = self.block_size + 1
        for name, ids in (("training", self.train_ids), ("validation", self.val_ids)):
            if len(ids) < need:
                raise UserError(
                    f"the {name} split has {len(ids)} tokens, fewer than data.block_size + 1 = {need}: "
                    f"use more text, a smaller data.block_size or a different data.val_fraction"
                )

    def train_dataloader(self) -> DataLoader:
        dataset = BlockDataset(self.train_ids, length=self.block_size + 1, stride=self.train_stride)
        return self._loader(dataset, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        dataset = BlockDataset(self.val_ids, length=self.block_size + 1, stride=self.block_size)
        return self._loader(dataset, shuffle=False)

    def _loader(self, dataset: Dataset, *, shuffle: bool) -> DataLoader:
        if self.collate_fn is None:
            raise RuntimeError(
                "attach(tokenizer, collate_fn) must be called before the loaders are built"
            )
        return make_loader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
        )
