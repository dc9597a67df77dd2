"""The report of rows a reader could not use, and what `on_bad_row` does with each: "error"
raises `UserError` at the first bad row, naming `file:line` (or the SQuAD question id), what is
wrong and what is valid; "skip" records it in the returned `BadRows`, so nothing vanishes
without a trace."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from xfmr.errors import UserError

OnBadRow = Literal["skip", "error"]
ON_BAD_ROW_CHOICES = ("skip", "error")


@dataclass(frozen=True)
class BadRow:
    """One row a reader could not use.

    Args:
        file: the file the row came from.
        reason: what is wrong with it and what would be valid.
        line: 1-based line number (line-based formats).
        key: where in a JSON document (SQuAD: the question id).
    """

    file: str
    reason: str
    line: int | None = None
    key: str | None = None

    @property
    def location(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}"
        return f"{self.file} ({self.key})" if self.key else self.file

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class BadRows:
    """The rows a reader skipped (on_bad_row="skip"); empty when every row was good."""

    rows: list[BadRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[BadRow]:
        return iter(self.rows)

    def counts(self) -> dict[str, int]:
        """Number of skipped rows per file."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.file] = counts.get(row.file, 0) + 1
        return counts

    def summary(self, first: int = 3) -> str:
        """How many rows of which file were skipped, and the first few reasons."""
        if not self.rows:
            return "no bad rows skipped"
        per_file = ", ".join(f"{n} in {file}" for file, n in self.counts().items())
        lines = [f"skipped {len(self.rows)} bad row(s): {per_file}"]
        lines += [f"  {row}" for row in self.rows[:first]]
        if len(self.rows) > first:
            lines.append(f"  ... and {len(self.rows) - first} more")
        return "\n".join(lines)


def check_on_bad_row(on_bad_row: str) -> None:
    """Refuse an `on_bad_row` that is neither "skip" nor "error"."""
    if on_bad_row not in ON_BAD_ROW_CHOICES:
        raise UserError(f"on_bad_row={on_bad_row!r} is not valid: use 'skip' or 'error'")


def reject(bad_rows: BadRows, on_bad_row: str, row: BadRow) -> None:
    """Raise for on_bad_row="error", record the row for "skip"."""
    if on_bad_row == "error":
        raise UserError(f"{row} (pass on_bad_row='skip' to skip bad rows and report them)")
    bad_rows.rows.append(row)
