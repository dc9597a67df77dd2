"""data=hf with `streaming: true`: rows are read as they are needed, never a whole split.

`datasets.load_dataset(..., streaming=True)` gives `IterableDataset`s. Every pass over the
training rows is an epoch: the dataset's own buffer shuffle, reseeded per epoch, orders them, and
under DDP each process reads its share (`split_dataset_by_node`). Rows become the examples the
in-memory modules give, batched by the objective's `collate_fn`: text rows are encoded, joined
by newlines (as the in-memory text is) and packed into windows of block_size + 1 tokens;
a labelled row or a pair is one example.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from xfmr.data.base import make_loader, require_positive
from xfmr.data.formats.bad_rows import BadRow, BadRows
from xfmr.data.hf_rows import BadCell, class_names, row_cells
from xfmr.data.hf_source import HFSource
from xfmr.data.loading import device_loading
from xfmr.data.settings import AUTO_WORKERS, check_num_workers
from xfmr.errors import UserError
from xfmr.text.sample import head
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")

# Without `data.labels` or a ClassLabel column, the label set is what this many rows hold.
LABEL_SCAN_ROWS = 10_000
ROW_SEPARATOR = "\n"  # between rows of text, as the in-memory data=hf text joins them


def pack_windows(
    token_rows: Iterable[list[int]], *, length: int, separator: list[int]
) -> Iterator[torch.Tensor]:
    """Windows of `length` tokens of the rows' ids joined by `separator`, one every `length - 1`
    tokens: a window's last token is the next one's first, so every token is a target once (as
    the text module's validation windows). A last, shorter window is dropped."""
    buffer: list[int] = []
    for index, ids in enumerate(token_rows):
        buffer.extend(separator if index else [])
        buffer.extend(ids)
        while len(buffer) >= length:
            yield torch.tensor(buffer[:length], dtype=torch.long)
            del buffer[: length - 1]


class StreamedExamples(IterableDataset):
    """The examples `to_examples` makes of a stream of rows; each pass over it is an epoch of
    the stream (its shuffle buffer reseeded), and with `repeat` the passes never end."""

    def __init__(
        self,
        rows: Any,
        to_examples: Callable[[Iterable[dict[str, Any]]], Iterator[Any]],
        *,
        empty: str,
        repeat: bool = False,
    ) -> None:
        self.rows = rows
        self.to_examples = to_examples
        self.empty = empty  # the message when a pass gives no example
        self.repeat = repeat
        self.epoch = 0  # counted in the process that iterates (a persistent worker keeps it)

    def __iter__(self) -> Iterator[Any]:
        while True:
            self.rows.set_epoch(self.epoch)
            self.epoch += 1
            count = 0
            for example in self.to_examples(self.rows):
                count += 1
                yield example
            if count == 0 and get_worker_info() is not None:
                return  # a DataLoader worker given no shard of the stream (datasets warns)
            if count == 0:
                raise UserError(self.empty)
            if not self.repeat:
                return


class HFStreamingDataModule(L.LightningDataModule):
    """Rows of a streamed Hugging Face dataset as `kind` examples (text | labelled | pairs).

    Args:
        source: the dataset, loaded with `streaming=True`.
        kind: what the rows become.
        fields: {config key: column} of the kind's columns (`text_field`, `label_field`,
            `text_pair_field`, `source_field`, `target_field`; None: not used).
        labels: labelled: the label set in class-index order; None: a ClassLabel column's
            names, else the sorted labels of the first LABEL_SCAN_ROWS training rows.
        block_size: text: tokens the model sees per window.
        max_length: pairs: tokens kept per side; None keeps whole sentences.
        shuffle_buffer: rows held by the training stream's shuffle buffer.
        batch_size, num_workers: as the in-memory modules.
        on_bad_row: "error" stops at a row with a missing or empty cell; "skip" drops it and
            logs how many were dropped in each pass.
    """

    def __init__(
        self,
        *,
        source: HFSource,
        kind: str,
        fields: dict[str, str | None],
        labels: list[str] | None = None,
        block_size: int = 64,
        max_length: int | None = None,
        shuffle_buffer: int = 10_000,
        batch_size: int = 32,
        num_workers: int | str = AUTO_WORKERS,
        on_bad_row: str = "error",
    ) -> None:
        super().__init__()
        require_positive(
            block_size=block_size, batch_size=batch_size, shuffle_buffer=shuffle_buffer
        )
        self.source = source
        self.kind = self.gives = kind
        self.fields = {key: column for key, column in fields.items() if column is not None}
        self.labels = [str(label) for label in labels] if labels else None
        self.labels_scanned = False
        self.block_size = block_size
        self.max_length = max_length
        self.shuffle_buffer = shuffle_buffer
        self.batch_size = batch_size
        self.num_workers = check_num_workers(num_workers)
        self.on_bad_row = on_bad_row
        self.tokenizer: TextTokenizer | None = None
        self.collate_fn: Callable[[list[Any]], dict] | None = None
        self.window = 1  # training batches per optimizer step, as `attach` is given it

    # -- rows ------------------------------------------------------------------------------
    def _cells(
        self, rows: Iterable[dict[str, Any]], where: str, *, labels: list[str] | None = None
    ) -> Iterator[list[str]]:
        """Each usable row's cells, in `self.fields` order (text kind: None is empty text); a
        row with a missing or empty cell, or a label outside `labels`, is bad."""
        columns = list(self.fields.values())
        label = list(self.fields).index("label_field") if labels is not None else None
        names = [class_names(self.source.splits()[where], column) for column in columns]
        bad_rows = BadRows()
        for index, row in enumerate(rows):
            missing = next((k for k, c in self.fields.items() if c not in row), None)
            if missing:
                raise UserError(
                    f"data.{missing}={self.fields[missing]!r} is not a column of {where}; "
                    f"its columns: {list(row)}"
                )
            values = [row[column] for column in columns]
            if self.kind == "text":
                yield [_text_cell(values[0], self.fields["text_field"], where)]
                continue
            cells = row_cells(values, columns, names, label=label, labels=labels)
            if not isinstance(cells, BadCell):
                yield cells
                continue
            bad = BadRow(where, str(cells) + self._label_hint(cells), key=f"row {index}")
            if self.on_bad_row == "error":
                raise UserError(
                    f"{bad} (set data.on_bad_row=skip to skip bad rows and report them)"
                )
            bad_rows.rows.append(bad)
        if len(bad_rows):
            log.warning("%s", bad_rows.summary())

    def training_text_sample(self, max_bytes: int) -> Iterator[str]:
        """The head of the training rows' text, unshuffled, at most `max_bytes` of UTF-8: what
        the tokenizer trains on (a label is not text)."""
        train = self.source.split_names()[0]
        keys = [k for k in self.fields if k != "label_field"]
        positions = [list(self.fields).index(k) for k in keys]

        def texts() -> Iterator[str]:
            rows = self._cells(self.source.splits()[train], train)
            for index, cells in enumerate(rows):
                text = ROW_SEPARATOR.join(cells[i] for i in positions)
                yield (ROW_SEPARATOR if index else "") + text

        return head(texts(), max_bytes)

    def label_names(self) -> list[str]:
        if self.labels is None:
            train = self.source.split_names()[0]
            rows = self.source.splits()[train]
            self.labels = class_names(rows, self.fields["label_field"])
            if self.labels is None:
                label = list(self.fields).index("label_field")
                scanned = self._cells(rows.take(LABEL_SCAN_ROWS), train)
                self.labels = sorted({cells[label] for cells in scanned})
                self.labels_scanned = True
        return list(self.labels)

    # -- examples --------------------------------------------------------------------------
    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict],
        *,
        window: int = 1,
    ) -> None:
        """Rows are encoded with `tokenizer` as batches are drawn; `collate_fn` batches them,
        and training batches are handed out `window` at a time (one optimizer step's)."""
        if self.kind == "labelled":
            self.label_names()
        self.tokenizer = tokenizer
        self.collate_fn = collate_fn
        self.window = window

    def examples(self, rows: Iterable[dict[str, Any]], where: str) -> Iterator[Any]:
        """The examples of `rows` of split `where`, as the in-memory module of `kind` gives."""
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise RuntimeError("attach(tokenizer, collate_fn) must be called before the examples")
        if self.kind == "text":
            ids = (tokenizer.encode(text) for (text,) in self._cells(rows, where))
            separator = tokenizer.encode(ROW_SEPARATOR)
            yield from pack_windows(ids, length=self.block_size + 1, separator=separator)
        elif self.kind == "pairs":
            cut = self.max_length
            for source, target in self._cells(rows, where):
                yield tokenizer.encode(source)[:cut], tokenizer.encode(target)[:cut]
        else:
            labels = self.label_names()
            index = {label: i for i, label in enumerate(labels)}
            for text, label, *pair in self._cells(rows, where, labels=labels):
                yield (
                    tokenizer.encode(text),
                    tokenizer.encode(pair[0]) if pair else None,
                    index[label],
                )

    def _label_hint(self, problem: str) -> str:
        if self.labels_scanned and problem.startswith("unknown label"):
            return (
                f" (the labels found in the first {LABEL_SCAN_ROWS} training rows): list every "
                "label in data.labels"
            )
        return ""

    # -- loaders ---------------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        where = self.source.split_names()[0]
        rows = self.source.splits()[where]
        # The run's seed: run_training() seeds torch with it, alike in every DDP process, so all share
        # one order of shards and rows and `split_dataset_by_node` gives each its own rows.
        rows = rows.shuffle(seed=torch.initial_seed() % 2**32, buffer_size=self.shuffle_buffer)
        rank, world_size = self._node()
        if world_size > 1:
            from datasets.distributed import split_dataset_by_node

            rows = split_dataset_by_node(rows, rank=rank, world_size=world_size)
        # Under DDP the processes' shares differ in length: passes never end (no process
        # waits at an epoch's end for the others), and trainer.max_steps ends the run.
        dataset = StreamedExamples(
            rows, lambda r: self.examples(r, where), empty=self._empty(where), repeat=world_size > 1
        )
        return self._loader(dataset, training=True)

    def val_dataloader(self) -> DataLoader:
        where = self.source.split_names()[1]
        rows = self.source.splits()[where]  # every process validates on all of it
        dataset = StreamedExamples(
            rows, lambda r: self.examples(r, where), empty=self._empty(where)
        )
        return self._loader(dataset, training=False)

    def _empty(self, where: str) -> str:
        if self.kind == "text":
            return (
                f"data: {where} has fewer than data.block_size + 1 = {self.block_size + 1} "
                "tokens: use more rows or a smaller data.block_size"
            )
        return f"data: {where} has no usable rows"

    def _node(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        if trainer is None or trainer.world_size == 1:
            return 0, 1
        if trainer.max_steps in (None, -1):
            raise UserError(
                "data.streaming=true under DDP trains until trainer.max_steps (its processes' "
                "shares of the stream differ in length): set trainer.max_steps"
            )
        return trainer.global_rank, trainer.world_size

    def _loader(self, dataset: StreamedExamples, *, training: bool) -> DataLoader:
        if self.collate_fn is None:
            raise RuntimeError(
                "attach(tokenizer, collate_fn) must be called before the loaders are built"
            )
        # A worker beyond the stream's shards would have no rows to read.
        shards = getattr(dataset.rows, "num_shards", None)
        loading = device_loading(self.trainer, self.num_workers, training=training, most=shards)
        return make_loader(
            dataset,
            batch_size=self.batch_size,
            shuffle=False,  # the stream's buffer shuffles; a DataLoader cannot
            drop_last=training,
            num_workers=loading.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=loading.pin_memory,
            window=self.window if training else None,
        )


def _text_cell(value: Any, column: str, where: str) -> str:
    """A text row's text; None is an empty row, as the in-memory text reads it."""
    if value is not None and not isinstance(value, str):
        raise UserError(
            f"data.text_field={column!r} of {where} holds {type(value).__name__} values, not text"
        )
    return value or ""
