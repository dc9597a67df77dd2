"""Labelled texts (or text pairs) for classification from TSV, CSV or JSON Lines files."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from xfmr.data.formats.bad_rows import BadRow, BadRows, OnBadRow, check_on_bad_row, reject
from xfmr.data.formats.reading import FieldProblem, existing_file, json_text, jsonl_objects
from xfmr.errors import UserError

JSONL_SUFFIXES = (".jsonl", ".ndjson")
DELIMITER_BY_SUFFIX = {".tsv": "\t", ".csv": ","}


@dataclass(frozen=True)
class TextExample:
    """A text (or text pair) classification example; `label` is kept as the file's string."""

    text: str
    label: str
    text_pair: str | None = None


@dataclass(frozen=True)
class _Fields:
    """The resolved reading plan for a delimited file."""

    text: str | int
    label: str | int
    text_pair: str | int | None
    labels: tuple[str, ...] | None


def read_delimited(
    path: str | Path,
    *,
    text_field: str | int,
    label_field: str | int,
    text_pair_field: str | int | None = None,
    delimiter: str | None = None,
    has_header: bool | None = None,
    labels: list[str] | None = None,
    on_bad_row: OnBadRow = "error",
) -> tuple[list[TextExample], BadRows]:
    """Read a TSV, CSV or JSONL classification file into `TextExample`s.

    Args:
        path: the file; `.tsv`, `.csv` and `.jsonl` set the format unless `delimiter` is given.
        text_field, label_field, text_pair_field: column names (header or JSON keys), or
            0-based column indices for a delimited file.
        delimiter: the column separator; None infers it from the suffix.
        has_header: None detects a header: the first row is one when it holds every field
            named by string. Without a header, fields must be column indices.
        labels: the valid labels; any other label is a bad row.
        on_bad_row: "error" raises at the first bad row, "skip" records it in `BadRows`.
    """
    check_on_bad_row(on_bad_row)
    file = existing_file(path)
    fields = _Fields(
        text_field,
        label_field,
        text_pair_field,
        tuple(str(x) for x in labels) if labels is not None else None,
    )
    if delimiter is None and file.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl_examples(file, fields, on_bad_row)
    if delimiter is None:
        if file.suffix.lower() not in DELIMITER_BY_SUFFIX:
            raise UserError(
                f"cannot tell the format of {str(file)!r} from its suffix {file.suffix!r}: "
                "use .tsv, .csv or .jsonl, or pass delimiter"
            )
        delimiter = DELIMITER_BY_SUFFIX[file.suffix.lower()]
    return _read_delimited_examples(file, fields, delimiter, has_header, on_bad_row)


def _read_jsonl_examples(
    file: Path, fields: _Fields, on_bad_row: str
) -> tuple[list[TextExample], BadRows]:
    names = [f for f in (fields.text, fields.label, fields.text_pair) if f is not None]
    if not all(isinstance(f, str) for f in names):
        raise UserError(
            f"{str(file)!r} is JSON Lines: fields must be key names, not column indices {names}"
        )
    examples: list[TextExample] = []
    bad_rows = BadRows()
    for number, obj in jsonl_objects(file, bad_rows, on_bad_row):
        values = {f: json_text(obj, f, allow_number=f == fields.label) for f in names}
        problem = _example_problem(values, fields)
        if problem:
            reject(bad_rows, on_bad_row, BadRow(str(file), problem, number))
            continue
        examples.append(_example(values, fields))
    return examples, bad_rows


def _example_problem(values: dict[Any, str], fields: _Fields) -> str | None:
    for value in values.values():
        if isinstance(value, FieldProblem):
            return str(value)
    label = values[fields.label]
    if fields.labels is not None and label not in fields.labels:
        return f"unknown label {label!r}; valid labels: {list(fields.labels)}"
    return None


def _example(values: dict[Any, str], fields: _Fields) -> TextExample:
    pair = values[fields.text_pair] if fields.text_pair is not None else None
    return TextExample(text=values[fields.text], label=values[fields.label], text_pair=pair)


def _csv_rows(file: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, cells) per non-blank row. TSV has no quoting: quotes are text."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        start = 1
        try:
            for cells in reader:
                if cells and any(c.strip() for c in cells):
                    yield start, cells
                start = reader.line_num + 1
        except csv.Error as e:
            raise UserError(f"{file}:{start}: cannot parse the row ({e})") from None
        except UnicodeDecodeError as e:
            raise UserError(f"data file {str(file)!r} is not UTF-8 text: {e}") from None


def _read_delimited_examples(
    file: Path, fields: _Fields, delimiter: str, has_header: bool | None, on_bad_row: str
) -> tuple[list[TextExample], BadRows]:
    rows = _csv_rows(file, delimiter)
    first = next(rows, None)
    if first is None:
        raise UserError(f"data file {str(file)!r} has no rows")
    columns, n_columns, header = _resolve_columns(file, first[1], fields, has_header)
    examples: list[TextExample] = []
    bad_rows = BadRows()
    data_rows = rows if header else chain([first], rows)
    for number, cells in data_rows:
        if len(cells) != n_columns:
            reason = (
                f"{len(cells)} columns, expected {n_columns} "
                f"(like {'the header' if header else 'the first row'}); "
                f"delimiter is {delimiter!r}"
            )
            reject(bad_rows, on_bad_row, BadRow(str(file), reason, number))
            continue
        values = {}
        for name, index in columns.items():
            text = cells[index].strip()
            values[name] = text if text else FieldProblem(f"column {name!r} is empty")
        problem = _example_problem(values, fields)
        if problem:
            reject(bad_rows, on_bad_row, BadRow(str(file), problem, number))
            continue
        examples.append(_example(values, fields))
    return examples, bad_rows


def _resolve_columns(
    file: Path, first_row: list[str], fields: _Fields, has_header: bool | None
) -> tuple[dict[str | int, int], int, bool]:
    """Map each field to a column index; returns (columns, column count, first row is header)."""
    wanted = [f for f in (fields.text, fields.label, fields.text_pair) if f is not None]
    names = [f for f in wanted if isinstance(f, str)]
    cells = [c.strip() for c in first_row]
    if has_header is None:
        has_header = bool(names) and all(n in cells for n in names)
        if names and not has_header:
            raise UserError(
                f"{str(file)!r}: fields {names} are not all in the first row {cells}; name "
                "columns from the header, or give 0-based column indices and has_header=false"
            )
    if not has_header and names:
        raise UserError(
            f"{str(file)!r} has no header (has_header=false), so fields {names} cannot be "
            f"found by name: give 0-based column indices 0..{len(cells) - 1}"
        )
    columns: dict[str | int, int] = {}
    for f in wanted:
        if isinstance(f, str):
            if f not in cells:
                raise UserError(f"{str(file)!r}: field {f!r} is not in the header {cells}")
            columns[f] = cells.index(f)
        elif not -len(cells) <= f < len(cells):
            raise UserError(
                f"{str(file)!r}: column index {f} is out of range: the file has {len(cells)} "
                f"columns, valid indices are 0..{len(cells) - 1}"
            )
        else:
            columns[f] = f % len(cells)
    return columns, len(cells), has_header
