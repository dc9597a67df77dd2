"""A `Table` printed for a person (rich in a terminal, markdown for a report) or for a script
(csv, json, numbers as numbers): the same columns in each, and the table's notes below it (csv,
which has no place for them, says them on stderr)."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from typing import Any, TextIO

from xfmr.runs.compare.table import Table

FORMATS = ("table", "csv", "json", "markdown")
ROW_STYLES = {"failed": "red", "pruned": "yellow", "interrupted": "yellow"}


def render(table: Table, form: str, stream: TextIO | None = None) -> None:
    """Print `table` in the format `form` (one of FORMATS) to `stream` (stdout)."""
    stream = stream or sys.stdout
    if form == "table":
        print_rich(table, stream)
        for line in table.notes:
            print(line, file=stream)
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
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    console = Console(file=stream, highlight=False)
    shown = RichTable(title=Text(table.title), title_justify="left")
    numeric = numeric_columns(table)
    for column in table.columns:
        justify = "right" if column in numeric else "left"
        shown.add_column(Text(column), justify=justify, no_wrap=column != "note")
    for row in table.rows:
        # Text, not str: an override value like [1,2] is not rich markup.
        cells = [Text(cell_text(column, row.get(column))) for column in table.columns]
        shown.add_row(*cells, style=ROW_STYLES.get(str(row.get("status"))))
    if not console.is_terminal:  # a pipe or a file: as wide as the table, nothing cut
        unbounded = console.options.update_width(10_000)
        console.width = max(console.width, console.measure(shown, options=unbounded).maximum)
    console.print(shown)


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
