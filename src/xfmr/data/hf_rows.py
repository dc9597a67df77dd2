"""Rows of a Hugging Face dataset as text: each cell stripped (a `ClassLabel` index becomes its
class name), or the reason the row cannot be used, reported as a bad row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xfmr.data.base import usable_rows
from xfmr.data.formats.bad_rows import BadRow, BadRows
from xfmr.data.hf_source import HFSource
from xfmr.errors import UserError


def require_columns(dataset: Any, where: str, fields: dict[str, str | None]) -> None:
    """Each named field is a column of `dataset`, else a UserError naming the key."""
    for key, column in fields.items():
        if column is not None and column not in dataset.column_names:
            raise UserError(
                f"data.{key}={column!r} is not a column of {where}; "
                f"its columns: {dataset.column_names}"
            )


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
