"""Sentence pairs from aligned line files (line i of one translates line i of the other) or
from JSON Lines."""

from __future__ import annotations

from pathlib import Path

from xfmr.data.formats.bad_rows import BadRow, BadRows, OnBadRow, check_on_bad_row, reject
from xfmr.data.formats.reading import (
    FieldProblem,
    existing_file,
    json_text,
    jsonl_objects,
    read_lines,
)
from xfmr.errors import UserError


def read_parallel(
    source_path: str | Path, target_path: str | Path, *, on_bad_row: OnBadRow = "error"
) -> tuple[list[tuple[str, str]], BadRows]:
    """Aligned line files (line i of source translates line i of target) -> [(source, target)].

    An empty line on either side is a bad row (reported with the source file's line number).
    """
    check_on_bad_row(on_bad_row)
    source_file, target_file = existing_file(source_path), existing_file(target_path)
    sources, targets = read_lines(source_file), read_lines(target_file)
    if len(sources) != len(targets):
        raise UserError(
            f"parallel files are not aligned: {str(source_file)!r} has {len(sources)} lines but "
            f"{str(target_file)!r} has {len(targets)}; both must have one line per sentence pair"
        )
    pairs: list[tuple[str, str]] = []
    bad_rows = BadRows()
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        empty = [
            str(f) for f, text in ((source_file, source), (target_file, target)) if not text.strip()
        ]
        if empty:
            reason = f"empty line in {' and '.join(empty)}; every line needs text on both sides"
            reject(bad_rows, on_bad_row, BadRow(str(source_file), reason, number))
            continue
        pairs.append((source.strip(), target.strip()))
    return pairs, bad_rows


def read_parallel_jsonl(
    path: str | Path,
    source_field: str = "source",
    target_field: str = "target",
    *,
    on_bad_row: OnBadRow = "error",
) -> tuple[list[tuple[str, str]], BadRows]:
    """JSON Lines with one {source_field: ..., target_field: ...} object per line."""
    check_on_bad_row(on_bad_row)
    file = existing_file(path)
    pairs: list[tuple[str, str]] = []
    bad_rows = BadRows()
    for number, obj in jsonl_objects(file, bad_rows, on_bad_row):
        source, target = json_text(obj, source_field), json_text(obj, target_field)
        problem = next((v for v in (source, target) if isinstance(v, FieldProblem)), None)
        if problem is not None:
            reject(bad_rows, on_bad_row, BadRow(str(file), str(problem), number))
            continue
        pairs.append((source, target))
    return pairs, bad_rows
