"""A `Table` printed for a person (rich in a terminal, markdown for a report) or for a script
(csv, json, numbers as numbers), and the table's notes below it (csv, which has no place for
them, says them on stderr). Every format has every column but the terminal's, which shows the
most needed ones that fit in WIDTH characters, the rows' notes below it where their column does
not fit, and names the columns it leaves out."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import textwrap
from typing import Any, TextIO

from xfmr.runs.compare.table import Table

FORMATS = ("table", "csv", "json", "markdown")
ROW_STYLES = {"failed": "red", "pruned": "yellow", "interrupted": "yellow"}
WIDTH = 100  # the widest the terminal's table prints, where the terminal is not narrower
NOTE = "note"  # the column that wraps to the room the others leave it
NOTE_WIDTH = 24  # the least room a note is shown in
WIDEST_CELL = 40  # a longer value (a path) folds onto more lines
WIDEST_WORD = 20  # a longer word of a header (trainer.val_check_interval) folds too
EVERY_COLUMN = "--format csv, json or markdown, or --html, has every column"


def render(table: Table, form: str, stream: TextIO | None = None) -> None:
    """Print `table` in the format `form` (one of FORMATS) to `stream` (stdout)."""
    stream = stream or sys.stdout
    if form == "table":
        print_rich(table, stream)
        return
    writers = {"csv": to_csv, "json": to_json, "markdown": to_markdown}
    stream.write(writers[form](table))
    if form == "csv":
        for line in table.notes:
            print(line, file=sys.stderr)


def cell_text(column: str, value: Any) -> str:
    """A value as a person reads it: "-" where a run has none, std as "± x", numbers short."""
    is_std = column.endswith(" std")
    if value is None:
        return "" if is_std else "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if is_std:
        return f"± {value:.3g}"
    if column.startswith("p ("):  # two figures say all a p-value can
        return f"{value:.2g}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if math.isfinite(value) and abs(value) >= 1e5 else f"{value:.5g}"


def numeric_columns(table: Table) -> set[str]:
    return {
        column
        for column in table.columns
        for row in table.rows
        if isinstance(row.get(column), int | float) and not isinstance(row.get(column), bool)
    }


def print_rich(table: Table, stream: TextIO) -> None:
    """The table as rich draws it, WIDTH characters wide at most (a narrower terminal's width),
    with the columns that fit (`view_columns`), and its notes below it, wrapped alike."""
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    console = Console(file=stream, highlight=False)
    console.width = min(console.width, WIDTH) if console.is_terminal else WIDTH
    widths = view_columns(table, console.width)
    shown = RichTable(title=Text(table.title), title_justify="left")
    numeric = numeric_columns(table)
    for column, width in widths.items():
        justify = "right" if column in numeric else "left"
        # A header wraps at its spaces; a longer word or value folds: nothing is cut.
        shown.add_column(Text(column), justify=justify, width=width, overflow="fold")
    for row in table.rows:
        # Text, not str: an override value like [1,2] is not rich markup.
        cells = [Text(cell_text(column, row.get(column))) for column in widths]
        shown.add_row(*cells, style=ROW_STYLES.get(str(row.get("status"))))
    console.print(shown)
    left_out = [column for column in table.columns if column not in (*widths, NOTE)]
    lines = [] if NOTE in widths else row_notes(table)
    if left_out:
        lines.append(f"Not shown here: {', '.join(left_out)} ({EVERY_COLUMN}).")
    for line in [*lines, *table.notes]:
        print(wrapped(line, console.width), file=stream)


def row_notes(table: Table) -> list[str]:
    """Each row's note, after the cells that name the row (`Table.names`)."""
    names = table.names or tuple(table.columns[:1])
    return [
        f"{', '.join(cell_text(name, row.get(name)) for name in names)}: {row[NOTE]}"
        for row in table.rows
        if row.get(NOTE)
    ]


def view_columns(table: Table, width: int) -> dict[str, int]:
    """The columns a view `width` characters wide shows, in the table's order, each with its
    width: the table's `ranked` ones first, then the rest, for as long as each fits whole (a
    header may wrap at its spaces); the note takes the room left, NOTE_WIDTH at least."""
    natural = {column: _natural_width(table, column) for column in table.columns}
    order = [c for c in table.ranked if c in natural]
    order += [c for c in table.columns if c not in order]
    kept, used = {}, 1  # the table's left edge
    for column in order:
        kept[column] = min(natural[column], NOTE_WIDTH) if column == NOTE else natural[column]
        used += kept[column] + 3  # a space either side and the edge after
        if used > width and len(kept) > 1:
            used -= kept.pop(column) + 3
            break
    if NOTE in kept:
        kept[NOTE] = min(natural[NOTE], kept[NOTE] + width - used)
    return {column: kept[column] for column in table.columns if column in kept}


def _natural_width(table: Table, column: str) -> int:
    """The widest cell of `column` (a note's widest whole), or its header's longest word."""
    cells = [len(cell_text(column, row.get(column))) for row in table.rows]
    words = [min(len(word), WIDEST_WORD) for word in column.split()]
    widest = max([*words, *cells], default=1)
    return widest if column == NOTE else min(widest, WIDEST_CELL)


def wrapped(text: str, width: int = WIDTH) -> str:
    """A sentence printed below a table, in lines of `width` characters at most, broken at
    spaces only (a column's name stays whole)."""
    return textwrap.fill(text, width, break_on_hyphens=False)


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in table.columns])
    return out.getvalue()


def to_json(table: Table) -> str:
    """Numbers as numbers; NaN and infinities, which JSON lacks, as null."""
    rows = [{column: _finite(row.get(column)) for column in table.columns} for row in table.rows]
    shown = {"title": table.title, "columns": table.columns, "rows": rows}
    return json.dumps({**shown, "notes": list(table.notes)}, indent=2) + "\n"


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def to_markdown(table: Table) -> str:
    numeric = numeric_columns(table)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    rule = ["---:" if column in numeric else "---" for column in table.columns]
    rows = [[cell_text(c, row.get(c)) for c in table.columns] for row in table.rows]
    lines = [f"**{table.title}**", "", line(table.columns), line(rule), *map(line, rows)]
    notes = ["", *table.notes] if table.notes else []
    return "\n".join([*lines, *notes]) + "\n"
