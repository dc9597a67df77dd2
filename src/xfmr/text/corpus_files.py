"""A corpus's text files read as a stream, never whole: their text from one character to
another, its length (remembered by the files' identity), and their documents' sentences. The
text is what `xfmr.data.files.read_utf8` reads (UTF-8, universal newlines); a file that is not
UTF-8 is refused by name."""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from xfmr.errors import UserError
from xfmr.files import atomic_write_bytes
from xfmr.text.fingerprints import cache_key, sources

READ_CHARS = 1 << 20  # characters read from a file at a time
CHAR_COUNTS_FILE = "char_counts.json"


def text_pieces(
    files: Sequence[Path], start: int = 0, stop: int | None = None, *, file_ends: bool = False
) -> Iterator[str | None]:
    """The files' text, concatenated, from character `start` to `stop`, as read_utf8 reads it
    (UTF-8, universal newlines), a block at a time; with `file_ends`, None after each file's
    text within the range (where a document ends, `xfmr.text.document_text`)."""
    position = 0
    for path in files:
        with _utf8(path) as f:
            while block := _read(f, path):
                begin, position = position, position + len(block)
                if position <= start:
                    continue
                if stop is not None and begin >= stop:
                    return
                yield block[max(0, start - begin) : None if stop is None else stop - begin]
        if file_ends and position > start:
            yield None


def count_chars(files: Sequence[Path], memo_dir: str | Path | None = None) -> int:
    """Characters of the files' text; a file with no text in it is refused, as read_text does.

    With `memo_dir`, counts are kept in `memo_dir/char_counts.json` by the files' identity (path,
    size, mtime), so a later run on the same files does not read a large corpus again to know
    where its training split ends."""
    if memo_dir is None:
        return _count_chars(files)
    memo_path = Path(memo_dir) / CHAR_COUNTS_FILE
    key = cache_key({"sources": sources(files)})
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if isinstance(memo.get(key), int):
        return memo[key]
    total = _count_chars(files)
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(memo_path, json.dumps({**memo, key: total}).encode())
    return total


def _count_chars(files: Sequence[Path]) -> int:
    total = 0
    for path in files:
        blank = True
        with _utf8(path) as f:
            while block := _read(f, path):
                total += len(block)
                blank = blank and not block.strip()
        if blank:
            raise UserError(f"data.path file {str(path)!r} is empty")
    return total


def document_lines(files: Sequence[Path]) -> Iterator[str | None]:
    """Each file's stripped non-blank lines, None where a document ends (a blank line after a
    document's sentences, or a file's end): the documents read_documents reads."""
    for path in files:
        in_document = False
        with _utf8(path) as f:
            for raw in _lines(f, path):
                for line in raw.splitlines():  # as str.splitlines splits the whole text
                    if line.strip():
                        in_document = True
                        yield line.strip()
                    elif in_document:
                        in_document = False
                        yield None
        if in_document:
            yield None


def sentences_per_document(files: Sequence[Path]) -> np.ndarray:
    """How many sentences each document of `document_lines(files)` has, in order."""
    counts, current = array("q"), 0
    for line in document_lines(files):
        if line is None:
            counts.append(current)
            current = 0
        else:
            current += 1
    return np.asarray(counts, dtype=np.int64)


def _utf8(path: Path):
    return open(path, encoding="utf-8")  # newline=None: universal newlines, as read_text


def _read(f, path: Path) -> str:
    try:
        return f.read(READ_CHARS)
    except UnicodeDecodeError as e:
        raise UserError(f"data.path file {str(path)!r} is not UTF-8 text ({e.reason})") from None


def _lines(f, path: Path) -> Iterator[str]:
    try:
        yield from f
    except UnicodeDecodeError as e:
        raise UserError(f"data.path file {str(path)!r} is not UTF-8 text ({e.reason})") from None
