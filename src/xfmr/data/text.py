"""Plain-text corpora cut into blocks of `block_size` tokens for language modelling."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from xfmr.data.base import cache_setting, make_loader, require_positive
from xfmr.data.files import read_utf8, text_files
from xfmr.data.loading import device_loading
from xfmr.data.settings import AUTO_WORKERS, check_num_workers, check_text_documents
from xfmr.errors import UserError
from xfmr.text.chunks import encode_text
from xfmr.text.corpus_files import count_chars, text_pieces
from xfmr.text.document_text import DocumentBreaks, encode_documents
from xfmr.text.sample import head
from xfmr.text.token_cache import MappedIds, open_or_build
from xfmr.text.tokenizers import TextTokenizer


class BlockDataset(Dataset):
    """Windows of `length` tokens starting every `stride` tokens of one long token stream: a
    tensor, or ids memory-mapped from the token cache (only a window is read and made int64).

    With `starts` (the token offset of each document of the stream, `xfmr.text.document_text`)
    a window is (ids, the document of each id, numbered from 0 in the window): packed rows
    (`data.packing`), whose documents the model keeps apart.
    """

    def __init__(
        self,
        ids: torch.Tensor | MappedIds,
        *,
        length: int,
        stride: int,
        starts: np.ndarray | None = None,
    ) -> None:
        self.ids = ids
        self.length = length
        self.stride = stride
        self.starts = starts
        self.count = max(0, (len(ids) - length) // stride + 1)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        start = index * self.stride
        window = self.ids[start : start + self.length]
        if isinstance(window, np.ndarray):
            window = torch.from_numpy(window.astype(np.int64))
        if self.starts is None:
            return window
        return window, window_documents(self.starts, start, self.length)


def window_documents(starts: np.ndarray, start: int, length: int) -> torch.Tensor:
    """(length,) the document of each token of the window at `start` of a stream whose
    documents start at the offsets `starts`, numbered from 0 at the window's first."""
    documents = np.searchsorted(starts, np.arange(start, start + length), side="right")
    return torch.from_numpy(documents - documents[0])


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
        val_batches: the validation budget: at most this many batches of windows, spread
            evenly over the split and the same at every validation, so curves compare and a
            large split costs what a few hundred training steps do; a split within the budget
            is read whole. None reads every window (the exact figure; xfmr-eval's default).
        num_workers: DataLoader worker processes, or "auto": chosen for the device the run
            trains on when the loaders are built (`xfmr.data.loading`).
        cache: encode the files once per tokenizer into `cache_dir` and memory-map the ids
            (xfmr.text.token_cache); false encodes them in memory in every run. Text that
            does not come from `path` (generated, downloaded) is always encoded in memory.
        cache_dir: where token caches go (conf: `${paths.cache_dir}/tokens`).
        document_separator: a document ends after each occurrence of this string (kept at
            its end); None: no documents end at a string. With documents, each is encoded
            alone (`xfmr.text.document_text`).
        documents_per_file: a document ends at the end of each file of `path`.
        packing: each block keeps its documents apart (its `document_ids`: attention within
            a document, positions from 0 at each, the target across a boundary not counted);
            needs documents. False: attention runs across them, as in one stream.
    """

    gives = "text"  # the kind of examples, xfmr.kinds
    # Every training batch is batch_size x (block_size + 1) (the short last one is dropped):
    # compile=auto's cue for CUDA graphs (xfmr.training.compiling.auto_mode).
    fixed_batch_shape = True

    def __init__(
        self,
        *,
        path: str | Sequence[str] | None = None,
        val_fraction: float = 0.1,
        block_size: int = 64,
        batch_size: int = 12,
        train_stride: int = 1,
        val_batches: int | None = None,
        num_workers: int | str = AUTO_WORKERS,
        cache: bool = False,
        cache_dir: str | None = None,
        document_separator: str | None = None,
        documents_per_file: bool = False,
        packing: bool = False,
    ) -> None:
        super().__init__()
        check_text_documents(
            {
                "document_separator": document_separator,
                "documents_per_file": documents_per_file,
                "packing": packing,
            }
        )
        if not 0.0 < val_fraction < 1.0:
            raise UserError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
        require_positive(block_size=block_size, batch_size=batch_size, train_stride=train_stride)
        if val_batches is not None:
            require_positive(val_batches=val_batches)
        self.path = path
        self.val_fraction = val_fraction
        self.block_size = block_size
        self.batch_size = batch_size
        self.train_stride = train_stride
        self.val_batches = val_batches
        self.num_workers = check_num_workers(num_workers)
        self.cache = cache_setting(cache, cache_dir)
        self.cache_dir = cache_dir
        self.documents = DocumentBreaks(document_separator, documents_per_file)
        self.packing = packing
        self._split: tuple[str, str] | None = None
        self.train_ids: torch.Tensor | MappedIds | None = None
        self.val_ids: torch.Tensor | MappedIds | None = None
        # With documents: the token offset of each document of a split (and its end).
        self.starts: dict[str, np.ndarray] = {}
        self.collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]] | None = None
        self.window = 1  # training batches per optimizer step, as `attach` is given it

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

    def training_text_sample(self, max_bytes: int) -> Iterator[str]:
        """The head of the training split (as `split_text` cuts it), at most `max_bytes` of
        UTF-8, read a block at a time: what the tokenizer trains on."""
        if self.path is None:  # text made in code or read from elsewhere (synthetic, data=hf)
            return head([self.split_text()[0]], max_bytes)
        files = self.files()
        memo = self.cache_dir if self.cache else None
        train_chars = int(count_chars(files, memo) * (1.0 - self.val_fraction))
        return head(text_pieces(files, 0, train_chars), max_bytes)

    def cached_files(self) -> list[Path] | None:
        """The files the token cache encodes; None when the ids are made in memory."""
        return self.files() if self.cache and self.path is not None else None

    # -- tokens ----------------------------------------------------------------------------
    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]],
        *,
        window: int = 1,
    ) -> None:
        """Encode both splits with `tokenizer` (or memory-map them from the token cache);
        batches are made by the objective's `collate_fn`, training batches handed out `window`
        at a time (one optimizer step's, gradient accumulation)."""
        if self.documents.any:
            self._attach_documents(tokenizer)
        else:
            self.train_ids, self.val_ids = self._stream(tokenizer)
        self.collate_fn = collate_fn
        self.window = window
        need = self.block_size + 1
        for name, ids in (("training", self.train_ids), ("validation", self.val_ids)):
            if len(ids) < need:
                raise UserError(
                    f"the {name} split has {len(ids)} tokens, fewer than data.block_size + 1 = {need}: "
                    f"use more text, a smaller data.block_size or a different data.val_fraction"
                )

    def _stream(
        self, tokenizer: TextTokenizer
    ) -> tuple[torch.Tensor | MappedIds, torch.Tensor | MappedIds]:
        """Both splits' ids, each encoded as one stream."""
        files = self.cached_files()
        if files is None:
            return tuple(torch.from_numpy(encode_text(tokenizer, t)) for t in self.split_text())
        cache = open_or_build(
            files,
            tokenizer,
            layout="text",
            val_fraction=self.val_fraction,
            cache_dir=self.cache_dir,
        )
        split = cache.index["train_tokens"]
        self._split = None  # the tokenizer's training text, if it was read, is not needed
        return cache.ids(0, split), cache.ids(split, cache.index["tokens"])

    def _attach_documents(self, tokenizer: TextTokenizer) -> None:
        """Both splits' ids, each document encoded alone, and where each document starts."""
        files = self.cached_files()
        if files is None:
            train, val = (
                encode_documents(tokenizer, pieces, self.documents.separator)
                for pieces in self._document_pieces()
            )
            self.train_ids, self.val_ids = torch.from_numpy(train[0]), torch.from_numpy(val[0])
            self.starts = {"train": train[1], "val": val[1]}
            return
        cache = open_or_build(
            files,
            tokenizer,
            layout="text",
            val_fraction=self.val_fraction,
            cache_dir=self.cache_dir,
            documents=self.documents,
        )
        split, starts = cache.index["train_tokens"], cache.document_starts()
        first_val = int(np.searchsorted(starts, split))  # the split ends a document
        self.train_ids = cache.ids(0, split)
        self.val_ids = cache.ids(split, cache.index["tokens"])
        self.starts = {"train": starts[: first_val + 1], "val": starts[first_val:] - split}
        self._split = None

    def _document_pieces(self) -> tuple[Iterable[str | None], Iterable[str | None]]:
        """Each split's text, with None at each file's end if a file is a document."""
        if self.path is None:  # text made in code or read from elsewhere: no files
            if self.documents.per_file:
                raise UserError(
                    "data.documents_per_file=true needs data.path files: this data has none; "
                    "use data.document_separator"
                )
            return tuple([text] for text in self.split_text())
        files, ends = self.files(), self.documents.per_file
        cut = int(count_chars(files) * (1.0 - self.val_fraction))  # as split_text cuts
        return text_pieces(files, 0, cut, file_ends=ends), text_pieces(files, cut, file_ends=ends)

    def train_dataloader(self) -> DataLoader:
        dataset = BlockDataset(
            self.train_ids,
            length=self.block_size + 1,
            stride=self.train_stride,
            starts=self.starts.get("train") if self.packing else None,
        )
        return self._loader(dataset, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        windows = self._val_windows()
        read = self.val_coverage()["windows"]
        # Window i of `read` is the split's window i * N // read: evenly spread, never moving.
        chosen = windows if read == len(windows) else evenly_spaced(windows, read)
        return self._loader(chosen, shuffle=False)

    def val_coverage(self, batches: int | None = None) -> dict[str, int]:
        """How much of the validation split one validation reads: `windows` of the split's
        `of` (every `block_size` tokens), and the `tokens` they predict; `batches` caps it at
        what a loop reading only that many batches sees (trainer.limit_val_batches). Packed
        windows predict nothing from a document's last token (`CausalLMObjective.collate`)."""
        total = len(self._val_windows())
        chosen = (
            total if self.val_batches is None else min(total, self.val_batches * self.batch_size)
        )
        read = chosen if batches is None else min(chosen, batches * self.batch_size)
        tokens = read * self.block_size
        if self.packing and read:
            # The loader's windows (`val_dataloader`), the first `read` of them.
            firsts = np.arange(read) * total // chosen * self.block_size
            starts = self.starts["val"]
            ends = np.searchsorted(starts, firsts + self.block_size, side="right")
            tokens -= int((ends - np.searchsorted(starts, firsts, side="right")).sum())
        return {"windows": read, "of": total, "tokens": tokens}

    def _val_windows(self) -> BlockDataset:
        return BlockDataset(
            self.val_ids,
            length=self.block_size + 1,
            stride=self.block_size,
            starts=self.starts.get("val") if self.packing else None,
        )

    def _loader(self, dataset: Dataset, *, shuffle: bool) -> DataLoader:
        if self.collate_fn is None:
            raise RuntimeError(
                "attach(tokenizer, collate_fn) must be called before the loaders are built"
            )
        loading = device_loading(self.trainer, self.num_workers, training=shuffle)
        return make_loader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=shuffle,
            num_workers=loading.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=loading.pin_memory,
            window=self.window if shuffle else None,
        )


def evenly_spaced(dataset: Dataset, count: int) -> Subset:
    """`count` items of `dataset`, item i being `dataset[i * len(dataset) // count]`: a fixed
    sample spread over the whole of it, not its head."""
    total = len(dataset)  # type: ignore[arg-type]
    return Subset(dataset, [i * total // count for i in range(count)])
