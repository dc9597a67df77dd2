"""Resolving and checking data files named in a config (no heavy imports: the CLI checks early)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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
                f"{key}={str(p)!r} does not exist: give a text file or a directory of .txt files"
            )
    for f in files:
        if f.stat().st_size == 0:
            raise UserError(f"{key} file {str(f)!r} is empty")
    return files
