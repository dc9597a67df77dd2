"""One self-contained HTML page of a comparison: its tables, the metric's curves, and the sweep
in parallel coordinates (an axis per differing override, one for the metric). plotly.js is
inlined, so the page opens from disk with no server and no network."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from xfmr.runs.compare.figures import Curve
from xfmr.runs.compare.formats import cell_text, numeric_columns
from xfmr.runs.compare.runs import Run
from xfmr.runs.compare.table import Ranking, Table, differing_keys

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
<script>{plotly_js}</script>
</head>
<body>
<h1>{title}</h1>
{body}
</body>
</html>
"""
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; font-size: 14px; }
caption { text-align: left; font-weight: 600; padding: 0.4em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.8em; text-align: left; }
th { background: #f4f4f4; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { color: #b00020; }
tr.pruned td, tr.interrupted td { color: #9a6700; }
"""
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
MAX_TICKS = 10


def write_page(
    path: Path,
    *,
    tables: Sequence[Table],
    curves: Sequence[Curve],
    runs: Sequence[Run],
    ranking: Ranking,
) -> None:
    """The page for `tables` (the first is the summary), the curves and the runs' parallel
    coordinates, written to `path`."""
    from plotly.offline import get_plotlyjs

    sections = [html_table(table, f"table-{i}") for i, table in enumerate(tables)]
    sections.append(f"<h2>{escape(ranking.metric)} at each validation</h2>")
    sections.append(plot_div(curves_figure(curves, ranking.metric), "curves"))
    sections.append("<h2>The sweep in parallel coordinates</h2>")
    parallel = parallel_figure(runs, ranking)
    if parallel is None:
        sections.append("<p>No override differs between the runs that have the metric.</p>")
    else:
        sections.append(plot_div(parallel, "parallel"))
    title = f"xfmr-compare: {len(runs)} runs, {ranking.describe()}"
    page = PAGE.format(
        title=escape(title), style=STYLE, plotly_js=get_plotlyjs(), body="\n".join(sections)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")


def html_table(table: Table, element_id: str) -> str:
    numeric = numeric_columns(table)
    head = "".join(f"<th>{escape(column)}</th>" for column in table.columns)
    rows = []
    for row in table.rows:
        cells = "".join(
            f'<td class="{"number" if column in numeric else "text"}">'
            f"{escape(cell_text(column, row.get(column)))}</td>"
            for column in table.columns
        )
        rows.append(f'<tr class="{escape(str(row.get("status", "")))}">{cells}</tr>')
    return (
        f'<table id="{element_id}"><caption>{escape(table.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def plot_div(figure: Any, element_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(
        figure, full_html=False, include_plotlyjs=False, div_id=element_id, config=PLOT_CONFIG
    )


def curves_figure(curves: Sequence[Curve], metric: str) -> Any:
    import plotly.graph_objects as go

    figure = go.Figure(
        [go.Scatter(x=c.steps, y=c.values, mode="lines+markers", name=c.label) for c in curves]
    )
    figure.update_layout(
        template="plotly_white",
        height=480,
        xaxis_title="step",
        yaxis_title=metric,
        margin={"t": 30},
    )
    return figure


def parallel_figure(runs: Sequence[Run], ranking: Ranking) -> Any | None:
    """An axis per differing override and one for the final metric, a line per run that has
    it, coloured by the metric (the best brightest); None when no override differs."""
    import plotly.graph_objects as go

    shown = [run for run in runs if _finite(run.metrics.get(ranking.metric))]
    keys = differing_keys(shown)
    if not keys:
        return None
    values = [run.metrics[ranking.metric] for run in shown]
    dimensions = [axis(key, [run.overrides.get(key) for run in shown]) for key in keys]
    dimensions.append({"label": f"final {ranking.metric}", "values": values})
    # The metric's own axis reads the colours, so no colour bar.
    line = {"color": values, "colorscale": "Viridis", "reversescale": ranking.direction == "min"}
    figure = go.Figure(go.Parcoords(dimensions=dimensions, line=line))
    figure.update_layout(height=480, margin={"l": 80, "r": 80, "t": 80, "b": 40})
    return figure


def axis(key: str, values: Sequence[str | None]) -> dict[str, Any]:
    """Numbers on a numeric axis; anything else as categories, ticks labelled with the values."""
    try:
        numbers = [float(value) for value in values]
    except (TypeError, ValueError):
        categories = sorted({value or "-" for value in values})
        return {
            "label": key,
            "values": [categories.index(value or "-") for value in values],
            "tickvals": list(range(len(categories))),
            "ticktext": categories,
        }
    distinct = sorted(set(numbers))
    # A few values (seeds, layer counts) get a tick each, not 1.2, 1.4, ...
    ticks = {"tickvals": distinct} if len(distinct) <= MAX_TICKS else {}
    return {"label": key, "values": numbers, **ticks}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
