"""What the readers share: a data file checked to exist and hold something, its UTF-8 text and
lines, and JSON Lines objects with their text fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xfmr.data.formats.bad_rows import BadRow, BadRows, reject
from xfmr.errors import UserError


def existing_file(path: str | Path) -> Path:
    """`path` as a Path, refused unless it names an existing, non-empty file."""
    file = Path(path)
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        raise UserError(f"data file {str(file)!r} {what}: give an existing, non-empty file")
    if file.stat().st_size == 0:
        raise UserError(f"data file {str(file)!r} is empty")
    return file


def read_text(file: Path) -> str:
    """The file's text; anything but UTF-8 (a byte-order mark allowed) is refused."""
    try:
        # utf-8-sig: a byte-order mark would otherwise hide the first header name.
        return file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"data file {str(file)!r} is not UTF-8 text: {e}") from None


def read_lines(file: Path) -> list[str]:
    """The file's lines without line endings (\\n, \\r\\n and \\r all end a line)."""
    # Not str.splitlines: it also splits on \x1c, \u2028 and others that can sit inside text.
    text = read_text(file).replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def jsonl_objects(
    file: Path, bad_rows: BadRows, on_bad_row: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; malformed lines are bad rows."""
    for number, line in enumerate(read_lines(file), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            reject(bad_rows, on_bad_row, BadRow(str(file), f"not valid JSON ({e.msg})", number))
            continue
        if not isinstance(obj, dict):
            reason = f"expected a JSON object, found {type(obj).__name__}"
            reject(bad_rows, on_bad_row, BadRow(str(file), reason, number))
            continue
        yield number, obj


class FieldProblem(str):
    """A field value that is really the reason the field is unusable."""


def json_text(obj: dict[str, Any], name: str, *, allow_number: bool = False) -> str:
    """obj[name] as a stripped non-empty string, or a `FieldProblem` saying why it is not one."""
    if name not in obj:
        return FieldProblem(f"missing field {name!r}; fields present: {sorted(obj)}")
    value = obj[name]
    if allow_number and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return FieldProblem(
            f"field {name!r} must be a string, found {type(value).__name__} {value!r}"
        )
    if not value.strip():
        return FieldProblem(f"field {name!r} is empty")
    return value.strip()
