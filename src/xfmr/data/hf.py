"""Hugging Face `datasets` as a data source: a hub dataset by name, or local files through a
builder ("json", "csv", "text", "parquet"), read as any of the three kinds of examples.

The examples go through the file modules' own encoding and batching: `data.kind=text` is a
`TextCorpusDataModule`, `pairs` a `ParallelDataModule`, `labelled` a `DelimitedDataModule`,
each reading its rows from the dataset instead of from files. `datasets` is imported only when
the data is loaded, so config checks and `--help` never pay for it.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from xfmr.data.delimited import DelimitedDataModule
from xfmr.data.formats.bad_rows import ON_BAD_ROW_CHOICES
from xfmr.data.formats.delimited import TextExample
from xfmr.data.hf_rows import class_names, require_columns, text_rows
from xfmr.data.hf_source import HFSource
from xfmr.data.hf_stream import HFStreamingDataModule
from xfmr.data.parallel import ParallelDataModule
from xfmr.data.settings import AUTO_WORKERS
from xfmr.data.text import TextCorpusDataModule
from xfmr.declared import declare
from xfmr.errors import UserError

# --------------------------------------------------------------------------- the three kinds


class HFTextDataModule(TextCorpusDataModule):
    """`TextCorpusDataModule` over a text column: each split's rows joined by newlines."""

    def __init__(self, *, source: HFSource, text_field: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.text_field = text_field

    def split_text(self) -> tuple[str, str]:
        if self._split is None:
            train, val = self.source.split_names()  # the same when val_split == train_split
            self._split = (self._text(train), self._text(val))
        return self._split

    def _text(self, where: str) -> str:
        dataset = self.source.splits()[where]
        require_columns(dataset, where, {"text_field": self.text_field})
        lines = []
        for value in dataset[self.text_field]:
            if value is not None and not isinstance(value, str):
                raise UserError(
                    f"data.text_field={self.text_field!r} of {where} holds "
                    f"{type(value).__name__} values, not text"
                )
            lines.append(value or "")
        text = "\n".join(lines)
        if not text.strip():
            raise UserError(f"data.text_field={self.text_field!r} of {where} has no text")
        return text


class HFPairsDataModule(ParallelDataModule):
    """`ParallelDataModule` over a source column and a target column."""

    def __init__(
        self, *, source: HFSource, source_field: str, target_field: str, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.columns = {"source_field": source_field, "target_field": target_field}

    def read_pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        train, val = (
            text_rows(self.source, split, self.columns, on_bad_row=self.on_bad_row)
            for split in self.source.split_names()
        )
        return [(s, t) for s, t in train], [(s, t) for s, t in val]


class HFLabelledDataModule(DelimitedDataModule):
    """`DelimitedDataModule` over a text column (and a pair column) with a label column; a
    `ClassLabel` column keeps the dataset's own class names and order."""

    def __init__(self, *, source: HFSource, **kwargs: Any) -> None:
        train, val = source.split_names()
        super().__init__(train_path=train, val_path=val, **kwargs)
        self.source = source

    def examples(self) -> tuple[list[TextExample], list[TextExample]]:
        if self._examples is None and self.labels is None:
            train = self.source.splits()[self.source.split_names()[0]]
            self.labels = class_names(train, self.fields["label_field"])
        return super().examples()

    def _read(self, path: str, labels: list[str] | None) -> list[TextExample]:
        """The rows of split `path` (a name from `source.split_names()`) as examples."""
        fields = {key: column for key, column in self.fields.items() if column is not None}
        rows = text_rows(self.source, path, fields, on_bad_row=self.on_bad_row, labels=labels)
        pair = "text_pair_field" in fields
        return [TextExample(*cells[:2], text_pair=cells[2] if pair else None) for cells in rows]


# --------------------------------------------------------------------------- the builder


@declare(gives=("text", "labelled", "pairs"))  # chosen by data.kind
def hf_datamodule(
    *,
    kind: str,
    path: str,
    name: str | None = None,
    data_files: Any = None,
    revision: str | None = None,
    train_split: str = "train",
    val_split: str | None = "validation",
    val_fraction: float | None = None,
    cache_dir: str | None = None,
    text_field: str = "text",
    label_field: str = "label",
    text_pair_field: str | None = None,
    source_field: str = "source",
    target_field: str = "target",
    labels: list[str] | None = None,
    block_size: int = 64,
    train_stride: int = 1,
    max_length: int | None = None,
    batch_size: int = 32,
    num_workers: int | str = AUTO_WORKERS,
    on_bad_row: str = "error",
    streaming: bool = False,
    val_rows: int | None = None,
    shuffle_buffer: int = 10_000,
) -> L.LightningDataModule:
    """The data module of `kind` (text | labelled | pairs) over a Hugging Face dataset, reading
    the fields of that kind alone (conf/data/hf.yaml says which); with `streaming`, rows read
    as batches need them (`HFStreamingDataModule`: validation is `val_split` or the first
    `val_rows` rows, training rows pass a shuffle buffer of `shuffle_buffer`)."""
    _check_choices(kind, on_bad_row)
    source = HFSource(
        path=path,
        name=name,
        data_files=data_files,
        revision=revision,
        train_split=train_split,
        val_split=val_split,
        val_fraction=val_fraction,
        cache_dir=cache_dir,
        shuffle_held_out=kind != "text",  # text keeps its order: the tail validates
        streaming=streaming,
        val_rows=val_rows,
    )
    fields = _fields_of(kind, text_field, label_field, text_pair_field, source_field, target_field)
    return _datamodule(
        source,
        kind=kind,
        fields=fields,
        labels=labels,
        block_size=block_size,
        train_stride=train_stride,
        max_length=max_length,
        on_bad_row=on_bad_row,
        batch_size=batch_size,
        num_workers=num_workers,
        shuffle_buffer=shuffle_buffer,
    )


def _check_choices(kind: str, on_bad_row: str) -> None:
    if kind not in hf_datamodule.gives:
        raise UserError(f"data.kind={kind!r} is not valid: use one of {list(hf_datamodule.gives)}")
    if on_bad_row not in ON_BAD_ROW_CHOICES:
        raise UserError(f"data.on_bad_row={on_bad_row!r} is not valid: use 'skip' or 'error'")


def _fields_of(
    kind: str,
    text_field: str,
    label_field: str,
    text_pair_field: str | None,
    source_field: str,
    target_field: str,
) -> dict[str, str | None]:
    """The columns `kind` reads, by the keyword its data module takes each as."""
    return {
        "text": {"text_field": text_field},
        "labelled": {
            "text_field": text_field,
            "label_field": label_field,
            "text_pair_field": text_pair_field,
        },
        "pairs": {"source_field": source_field, "target_field": target_field},
    }[kind]


def _datamodule(source: HFSource, *, shuffle_buffer: int, **settings: Any) -> L.LightningDataModule:
    """Rows read as batches need them when `source` streams, else whole splits in memory."""
    if source.streaming:
        return _streaming_datamodule(source, shuffle_buffer=shuffle_buffer, **settings)
    return _in_memory_datamodule(source, **settings)


def _in_memory_datamodule(
    source: HFSource,
    *,
    kind: str,
    fields: dict[str, str | None],
    labels: list[str] | None,
    block_size: int,
    train_stride: int,
    max_length: int | None,
    on_bad_row: str,
    batch_size: int,
    num_workers: int | str,
) -> L.LightningDataModule:
    """The file module of `kind` over whole splits in memory, given only the settings it reads."""
    common = {"batch_size": batch_size, "num_workers": num_workers}
    if kind == "text":
        return HFTextDataModule(
            source=source, **fields, block_size=block_size, train_stride=train_stride, **common
        )
    if kind == "pairs":
        return HFPairsDataModule(
            source=source, **fields, max_length=max_length, on_bad_row=on_bad_row, **common
        )
    return HFLabelledDataModule(
        source=source, **fields, labels=labels, on_bad_row=on_bad_row, **common
    )


def _streaming_datamodule(
    source: HFSource, *, train_stride: int, **kwargs: Any
) -> L.LightningDataModule:
    if train_stride != 1:
        raise UserError(
            f"data.train_stride={train_stride} needs the whole text in memory; with "
            "data.streaming=true training windows follow one another every data.block_size "
            "tokens (leave data.train_stride=1)"
        )
    return HFStreamingDataModule(source=source, **kwargs)
