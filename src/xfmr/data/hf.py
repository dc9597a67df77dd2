"""Hugging Face `datasets` as a data source: a hub dataset by name, or local files through a
builder ("json", "csv", "text", "parquet"), read as any of the three kinds of examples.

The examples go through the file modules' own encoding and batching: `data.kind=text` is a
`TextCorpusDataModule`, `pairs` a `ParallelDataModule`, `labelled` a `DelimitedDataModule`,
each reading its rows from the dataset instead of from files. `datasets` is imported only when
the data is loaded, so config checks and `--help` never pay for it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
from omegaconf import OmegaConf

from xfmr.data.base import usable_rows
from xfmr.data.delimited import DelimitedDataModule
from xfmr.data.formats.bad_rows import ON_BAD_ROW_CHOICES, BadRow, BadRows
from xfmr.data.formats.delimited import TextExample
from xfmr.data.parallel import ParallelDataModule
from xfmr.data.settings import HF_PATH_CHOICES
from xfmr.data.text import TextCorpusDataModule
from xfmr.declared import declare
from xfmr.errors import UserError

# Held-out rows for labelled data and pairs are drawn with a fixed seed: hub datasets are often
# sorted by label (IMDb: all negative reviews, then all positive), so a tail would be one class.
SPLIT_SEED = 0


@dataclass
class HFSource:
    """A Hugging Face dataset and the splits that train and validate on it.

    Args:
        path: a hub name ("stanfordnlp/imdb"), a local dataset directory, or a builder for
            local files ("json", "csv", "text", "parquet") together with `data_files`.
        name: the dataset's configuration (e.g. "sst2" of "nyu-mll/glue"), if it has several.
        data_files: a builder's files: a path or glob, a list, or {split: path(s)}.
        revision: a hub branch, tag or commit that pins the data.
        train_split: the split to train on.
        val_split: the split to validate on; None holds out `val_fraction` of `train_split`.
        val_fraction: the held-out share of `train_split` when `val_split` is None.
        cache_dir: where `datasets` keeps prepared data; None: its own (HF_DATASETS_CACHE).
        shuffle_held_out: draw the held-out rows at random (seeded) rather than the tail.
        streaming: read rows as they are needed (`datasets.IterableDataset`s), never a whole
            split in memory; then the first `val_rows` rows of `train_split` may validate.
        val_rows: with `streaming`, how many rows at the head of `train_split` validate (the
            rest train) when `val_split` is None.
    """

    path: str
    name: str | None = None
    data_files: Any = None
    revision: str | None = None
    train_split: str = "train"
    val_split: str | None = "validation"
    val_fraction: float | None = None
    cache_dir: str | None = None
    shuffle_held_out: bool = False
    streaming: bool = False
    val_rows: int | None = None
    _splits: dict[str, Any] | None = field(default=None, init=False, repr=False)
    _row_numbers: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.path:
            raise UserError(f"data.path is not set: {HF_PATH_CHOICES}")
        if self.streaming:
            self._check_streamed_validation()
        elif self.val_rows is not None:
            raise UserError(
                f"data.val_rows={self.val_rows} is for data.streaming=true; without streaming "
                "hold out a share of the training split with data.val_fraction"
            )
        elif (self.val_split is None) == (self.val_fraction is None):
            raise UserError(
                f"data.val_split={self.val_split!r} and data.val_fraction={self.val_fraction!r}: "
                "give exactly one (a split name, or null and a fraction of the training split)"
            )
        if self.val_fraction is not None and not 0.0 < self.val_fraction < 1.0:
            raise UserError(f"data.val_fraction={self.val_fraction} must lie in (0, 1)")
        if OmegaConf.is_config(self.data_files):  # datasets wants plain lists and dicts
            self.data_files = OmegaConf.to_container(self.data_files, resolve=True)

    def _check_streamed_validation(self) -> None:
        if self.val_fraction is not None:
            raise UserError(
                f"data.val_fraction={self.val_fraction} needs the whole split in memory; with "
                "data.streaming=true give data.val_rows=N (the first N rows of data.train_split "
                "validate) or data.val_split=NAME"
            )
        if (self.val_split is None) == (self.val_rows is None):
            raise UserError(
                f"data.val_split={self.val_split!r} and data.val_rows={self.val_rows!r}: with "
                "data.streaming=true give exactly one (a split name, or null and a number of rows)"
            )
        if self.val_rows is not None and not (isinstance(self.val_rows, int) and self.val_rows > 0):
            raise UserError(f"data.val_rows={self.val_rows!r} must be a positive number of rows")

    def describe(self, split: str) -> str:
        return f"{self.path}:{split}"

    def split_names(self) -> tuple[str, str]:
        """How the training and validation rows are named in messages and bad-row reports."""
        if self.val_split is not None:
            return self.describe(self.train_split), self.describe(self.val_split)
        if self.val_rows is not None:
            return (
                self.describe(f"{self.train_split} (after row {self.val_rows})"),
                self.describe(f"{self.train_split} (first {self.val_rows} rows)"),
            )
        held_out = f"{self.train_split} (held-out {self.val_fraction:.0%})"
        return self.describe(f"{self.train_split} (rest)"), self.describe(held_out)

    def splits(self) -> dict[str, Any]:
        """{name from `split_names`: `datasets.Dataset`, or with `streaming` an unshuffled
        `datasets.IterableDataset`}, loaded once."""
        if self._splits is None:
            loaded = self._load()
            train = self._split(loaded, self.train_split, "train_split")
            if self.val_split is not None:
                parts = (train, self._split(loaded, self.val_split, "val_split"))
            elif self.val_rows is not None:  # streaming: the head validates, read afresh each time
                parts = (train.skip(self.val_rows), train.take(self.val_rows))
            else:
                orders = _hold_out(len(train), self.val_fraction, shuffle=self.shuffle_held_out)
                parts = tuple(train.select(order) for order in orders)
                self._row_numbers = dict(zip(self.split_names(), orders, strict=True))
            self._splits = dict(zip(self.split_names(), parts, strict=True))
        return self._splits

    def row_number(self, split: str, index: int) -> int:
        """Where row `index` of `split` (a name from `split_names`) sits in its dataset split."""
        numbers = self._row_numbers.get(split)
        return numbers[index] if numbers else index

    def _load(self) -> Any:
        try:
            import datasets
        except ImportError:
            raise UserError(
                "data=hf needs the Hugging Face `datasets` package: pip install 'xfmr[hf]'"
            ) from None
        try:
            return datasets.load_dataset(
                self.path,
                name=self.name,
                data_files=self.data_files,
                revision=self.revision,
                cache_dir=self.cache_dir,
                streaming=self.streaming,
            )
        except (OSError, ValueError, datasets.exceptions.DatasetsError) as e:
            raise UserError(
                f"data.path={self.path!r} (data.name={self.name!r}, "
                f"data.data_files={self.data_files!r}) could not be loaded: {e}"
            ) from None

    def _split(self, loaded: Any, split: str, key: str) -> Any:
        if split not in loaded:
            held_out = "data.val_rows=1000" if self.streaming else "data.val_fraction=0.1"
            hint = "" if key == "train_split" else f" (or data.val_split=null {held_out})"
            raise UserError(
                f"data.{key}={split!r} is not a split of data.path={self.path!r}; "
                f"its splits: {list(loaded)}{hint}"
            )
        return loaded[split]


def require_columns(dataset: Any, where: str, fields: dict[str, str | None]) -> None:
    """Each named field is a column of `dataset`, else a UserError naming the key."""
    for key, column in fields.items():
        if column is not None and column not in dataset.column_names:
            raise UserError(
                f"data.{key}={column!r} is not a column of {where}; "
                f"its columns: {dataset.column_names}"
            )


def _hold_out(n_rows: int, fraction: float, *, shuffle: bool) -> tuple[list[int], list[int]]:
    """(training rows, held-out rows) of a split of `n_rows`."""
    order = list(range(n_rows))
    if shuffle:
        random.Random(SPLIT_SEED).shuffle(order)
    cut = round(len(order) * (1.0 - fraction))
    if not 0 < cut < len(order):
        raise UserError(
            f"data.val_fraction={fraction} of {len(order)} rows leaves "
            f"{cut} to train and {len(order) - cut} to validate: both need at least one row"
        )
    return order[:cut], order[cut:]


# --------------------------------------------------------------------------- rows -> examples


class BadCell(str):
    """A cell that could not be used: the string is the reason."""


def class_names(dataset: Any, column: str | None) -> list[str] | None:
    """The names of a `ClassLabel` column (its integers index them), else None."""
    features = getattr(dataset, "features", None)  # a streamed dataset's may be unknown
    if column is None or features is None:
        return None
    return getattr(features.get(column), "names", None)


def _as_text(value: Any, column: str, names: list[str] | None) -> str:
    """A cell as stripped, non-empty text (a class index becomes its name), or a `BadCell`."""
    if names is not None and isinstance(value, int):
        if not 0 <= value < len(names):  # GLUE's unlabelled test rows hold -1
            return BadCell(f"{column!r} is {value}, not a class of {names}")
        value = names[value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return BadCell(f"{column!r} must be text, found {type(value).__name__} {value!r}")
    if not value.strip():
        return BadCell(f"{column!r} is empty")
    return value.strip()


def row_cells(
    values: Sequence[Any],
    columns: Sequence[str],
    names: Sequence[list[str] | None],
    *,
    label: int | None = None,
    labels: list[str] | None = None,
) -> list[str] | BadCell:
    """A row's `values` (of `columns`, with their class names) as text, or why it is bad: a
    missing or empty cell, or the value at `label` outside `labels`."""
    cells = [_as_text(v, c, n) for v, c, n in zip(values, columns, names, strict=True)]
    problem = next((c for c in cells if isinstance(c, BadCell)), None)
    if problem is None and label is not None and cells[label] not in labels:
        problem = BadCell(f"unknown label {cells[label]!r}; valid labels: {labels}")
    return cells if problem is None else problem


def text_rows(
    source: HFSource,
    split: str,
    fields: dict[str, str],
    *,
    on_bad_row: str,
    labels: list[str] | None = None,
) -> list[list[str]]:
    """The text of columns `fields` ({config key: column}) in each row of `split` (a name from
    `source.split_names()`). A missing or empty cell, or a `label_field` value outside `labels`,
    makes a bad row: an error, or skipped and reported (`on_bad_row`)."""
    dataset = source.splits()[split]
    require_columns(dataset, split, fields)
    columns = list(fields.values())
    names = [class_names(dataset, column) for column in columns]
    label = list(fields).index("label_field") if labels is not None else None
    rows: list[list[str]] = []
    bad_rows = BadRows()
    for index, row in enumerate(zip(*(dataset[column] for column in columns), strict=True)):
        cells = row_cells(row, columns, names, label=label, labels=labels)
        if not isinstance(cells, BadCell):
            rows.append(cells)
            continue
        bad = BadRow(split, str(cells), key=f"row {source.row_number(split, index)}")
        if on_bad_row == "error":
            raise UserError(f"{bad} (set data.on_bad_row=skip to skip bad rows and report them)")
        bad_rows.rows.append(bad)
    return usable_rows(rows, bad_rows, where=split)


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
    num_workers: int = 0,
    on_bad_row: str = "error",
    streaming: bool = False,
    val_rows: int | None = None,
    shuffle_buffer: int = 10_000,
) -> L.LightningDataModule:
    """The data module of `kind` (text | labelled | pairs) over a Hugging Face dataset.

    Only the fields of the chosen kind are read: text: `text_field`, `block_size`,
    `train_stride`; labelled: `text_field`, `label_field`, `text_pair_field`, `labels`; pairs:
    `source_field`, `target_field`, `max_length`. With `streaming`, rows are read as batches
    need them (`HFStreamingDataModule`): validation is `val_split` or the first `val_rows`
    rows, and training rows pass through a shuffle buffer of `shuffle_buffer` rows.
    """
    if kind not in hf_datamodule.gives:
        raise UserError(f"data.kind={kind!r} is not valid: use one of {list(hf_datamodule.gives)}")
    if on_bad_row not in ON_BAD_ROW_CHOICES:
        raise UserError(f"data.on_bad_row={on_bad_row!r} is not valid: use 'skip' or 'error'")
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
    common = {"batch_size": batch_size, "num_workers": num_workers}
    if streaming:
        return _streaming_datamodule(
            source,
            kind=kind,
            fields={
                "text": {"text_field": text_field},
                "labelled": {
                    "text_field": text_field,
                    "label_field": label_field,
                    "text_pair_field": text_pair_field,
                },
                "pairs": {"source_field": source_field, "target_field": target_field},
            }[kind],
            labels=labels,
            block_size=block_size,
            train_stride=train_stride,
            max_length=max_length,
            shuffle_buffer=shuffle_buffer,
            on_bad_row=on_bad_row,
            **common,
        )
    if kind == "text":
        return HFTextDataModule(
            source=source,
            text_field=text_field,
            block_size=block_size,
            train_stride=train_stride,
            **common,
        )
    if kind == "pairs":
        return HFPairsDataModule(
            source=source,
            source_field=source_field,
            target_field=target_field,
            max_length=max_length,
            on_bad_row=on_bad_row,
            **common,
        )
    return HFLabelledDataModule(
        source=source,
        text_field=text_field,
        label_field=label_field,
        text_pair_field=text_pair_field,
        labels=labels,
        on_bad_row=on_bad_row,
        **common,
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
    from xfmr.data.hf_stream import HFStreamingDataModule  # it imports this module

    return HFStreamingDataModule(source=source, **kwargs)
