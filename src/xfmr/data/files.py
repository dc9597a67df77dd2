"""Resolving and checking data files named in a config (no heavy imports: the CLI checks early)."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from pathlib import Path

from xfmr.data.sources import fetch_hint
from xfmr.errors import UserError


def text_files(path: str | Sequence[str] | None, *, key: str = "data.path") -> list[Path]:
    """A file, a directory (its `*.txt` files, sorted) or a list of either -> existing, non-empty files."""
    if path is None or path == "":
        raise UserError(f"{key} is not set: give a text file or a directory of .txt files")
    paths = [path] if isinstance(path, str | Path) else list(path)
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.txt"))
            if not found:
                raise UserError(f"{key}={str(p)!r} is a directory with no *.txt files")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(
                f"{key}={str(p)!r} does not exist: give a text file or a directory of .txt "
                f"files{fetch_hint(p)}"
            )
    for f in files:
        if f.stat().st_size == 0:
            raise UserError(f"{key} file {str(f)!r} is empty")
    return files


# Enough of a file's start to tell text from a binary file, read in well under a millisecond.
HEAD_BYTES = 1 << 16


def check_text_head(file: Path, *, key: str = "data.path") -> None:
    """The start of a data file is UTF-8 text, checked before anything loads; the rest is
    checked as the file is read (`read_utf8`)."""
    with open(file, "rb") as f:
        head = f.read(HEAD_BYTES)
    nul = head.find(b"\0")
    if nul >= 0:
        raise UserError(
            f"{key} file {str(file)!r} is not text (a NUL byte at byte {nul}): give UTF-8 text"
        )
    try:  # not final: the head may end inside a character
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as e:
        raise UserError(
            f"{key} file {str(file)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None


def read_utf8(file: Path, *, key: str = "data.path") -> str:
    """A data file's text; a file that is not UTF-8 is a UserError naming it and the byte."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{key} file {str(file)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None


def require_paths(what: str, **paths: str | None) -> None:
    """Each named `data.KEY` is set; else a UserError saying what file to give."""
    for key, value in paths.items():
        if not value:
            raise UserError(f"data.{key} is not set: give {what}")
