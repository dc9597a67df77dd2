"""One self-contained HTML page of a comparison: its tables, the metric's curves, and the sweep
in parallel coordinates (an axis per differing override, one for the metric). plotly.js is
inlined, so the page opens from disk with no server and no network.

The curves' x-axis switches between step, training tokens, FLOPs and seconds: the page holds
a figure per axis as JSON (`<script type="application/json" id="curves-views">`) and a few
lines of plain JavaScript redraw the curves with the chosen one (`#x=tokens` in the address
opens on that axis)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from xfmr.runs.compare.figures import BAND, SettingCurves, band, left_out, metric_curves
from xfmr.runs.compare.formats import cell_text, numeric_columns
from xfmr.runs.compare.importance import EVALUATORS, Importance, importance_table
from xfmr.runs.compare.points import AXES, AXIS_TITLES
from xfmr.runs.compare.runs import Run
from xfmr.runs.compare.table import SEED, Ranking, Table, differing_keys, metric_value

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
p.table-note { margin-top: -1.5em; margin-bottom: 2em; font-size: 13px; color: #555; }
"""
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
MAX_TICKS = 10
DEFAULT_AXIS = "step"
# Redraws the curves against the axis chosen (the select, or #x=AXIS in the address) from the
# figures the page holds, and says which runs that axis leaves out.
AXIS_SWITCH = """
(function () {
  var views = JSON.parse(document.getElementById("curves-views").textContent);
  var select = document.getElementById("curves-x");
  var note = document.getElementById("curves-note");
  function show(axis) {
    var view = views[axis];
    if (!view) return;
    select.value = axis;
    note.textContent = view.note;
    Plotly.react("curves", view.figure.data, view.figure.layout, CONFIG);
  }
  select.addEventListener("change", function () { show(select.value); });
  var asked = /x=(\\w+)/.exec(window.location.hash);
  if (asked && asked[1] !== select.value) show(asked[1]);
})();
"""


def write_page(
    path: Path,
    *,
    tables: Sequence[Table],
    keys: Sequence[str] | None,
    runs: Sequence[Run],
    ranking: Ranking,
    importance: Importance | None = None,
) -> None:
    """The page for `tables` (the first is the summary), the curves of the runs gathered by
    setting of `keys` (None: a curve per run), the runs' parallel coordinates and the
    parameters' importance, written to `path`."""
    from plotly.offline import get_plotlyjs

    sections = [html_table(table, f"table-{i}") for i, table in enumerate(tables)]
    sections.append(f"<h2>{escape(ranking.metric)} at each validation</h2>")
    sections += curves_section(runs, ranking.metric, keys)
    sections.append("<h2>The sweep in parallel coordinates</h2>")
    parallel = parallel_figure(runs, ranking)
    if parallel is None:
        sections.append("<p>No override differs between the runs that have the metric.</p>")
    else:
        sections.append(plot_div(parallel, "parallel"))
    if importance is not None:
        sections += importance_section(importance, ranking.quantity)
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
    notes = "".join(f'<p class="table-note">{escape(note)}</p>' for note in table.notes)
    return (
        f'<table id="{element_id}"><caption>{escape(table.title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{notes}"
    )


def curves_section(runs: Sequence[Run], metric: str, keys: Sequence[str] | None) -> list[str]:
    """The curves against the step, with a switch to tokens, FLOPs and seconds: each axis's
    figure and note as JSON in the page, for AXIS_SWITCH to draw."""
    import plotly.io as pio

    figures, views = {}, {}
    for axis in AXES:
        curves = metric_curves(runs, metric, keys, axis=axis)
        note = left_out(runs, metric, axis) or ""
        if not curves:
            note = f"No run recorded {metric} with {axis}. {note}".strip()
        figures[axis] = curves_figure(curves, metric, axis=axis)
        views[axis] = {
            "figure": json.loads(pio.to_json(figures[axis], validate=False)),
            "note": note,
        }
    options = "".join(
        f'<option value="{axis}"{" selected" if axis == DEFAULT_AXIS else ""}>'
        f"{escape(AXIS_TITLES[axis])}</option>"
        for axis in AXES
    )
    # "</" would end the script element early: JSON allows it escaped.
    data = json.dumps(views, allow_nan=False).replace("</", "<\\/")
    script = AXIS_SWITCH.replace("CONFIG", json.dumps(PLOT_CONFIG))
    default = views[DEFAULT_AXIS]
    return [
        f'<p><label for="curves-x">x-axis:</label> <select id="curves-x">{options}</select></p>',
        f'<p id="curves-note" class="table-note">{escape(default["note"])}</p>',
        plot_div(figures[DEFAULT_AXIS], "curves"),
        f'<script type="application/json" id="curves-views">{data}</script>',
        f"<script>{script}</script>",
    ]


def plot_div(figure: Any, element_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(
        figure, full_html=False, include_plotlyjs=False, div_id=element_id, config=PLOT_CONFIG
    )


def curves_figure(settings: Sequence[SettingCurves], metric: str, *, axis: str = "step") -> Any:
    """Per setting, one colour: its runs faint, the band, the mean, against `axis`; clicking a
    setting's legend entry hides all three."""
    import plotly.graph_objects as go

    traces = []
    for curves in settings:
        group = {"legendgroup": curves.label, "hoverlabel": {"namelength": -1}}
        faint = {"color": _rgba(curves.colour, 0.3), "width": 1}
        traces += [
            go.Scatter(
                x=run.x,
                y=run.values,
                mode="lines",
                line=faint,
                name=run.label,
                showlegend=False,
                **group,
            )  # fmt: skip
            for run in curves.runs
        ]
        low, high = band(curves)
        edge = {"width": 0, "color": curves.colour}
        traces.append(go.Scatter(x=curves.x, y=high, mode="lines", line=edge,
                                 showlegend=False, hoverinfo="skip", **group))  # fmt: skip
        traces.append(go.Scatter(x=curves.x, y=low, mode="lines", line=edge, fill="tonexty",
                                 fillcolor=_rgba(curves.colour, 0.2), showlegend=False,
                                 hoverinfo="skip", **group))  # fmt: skip
        traces.append(
            go.Scatter(
                x=curves.x,
                y=curves.mean,
                mode="lines+markers",
                line={"color": curves.colour, "width": 2.5},
                name=f"{curves.label} (n={len(curves.runs)})",
                **group,
            )  # fmt: skip
        )
    figure = go.Figure(traces)
    figure.update_layout(
        template="plotly_white",
        height=480,
        xaxis_title=AXIS_TITLES[axis],
        yaxis_title=metric,
        title={"text": f"mean per setting; band {BAND}; each run faint", "font": {"size": 13}},
        margin={"t": 50},
    )
    return figure


def importance_section(importance: Importance, metric: str) -> list[str]:
    table = importance_table(importance, metric)
    sections = [f"<h2>Which parameters mattered for {escape(metric)}</h2>"]
    if importance.reason:
        return [*sections, f'<p id="importance">{escape(table.title)}</p>']
    return [*sections, plot_div(importance_figure(table), "importance")]


def importance_figure(table: Table) -> Any:
    """A bar per parameter and evaluator, the most important parameter at the top."""
    import plotly.graph_objects as go

    names = [row["parameter"] for row in reversed(table.rows)]
    bars = [
        go.Bar(y=names, x=[row[e] for row in reversed(table.rows)], name=e, orientation="h")
        for e in EVALUATORS
    ]
    figure = go.Figure(bars)
    figure.update_layout(
        template="plotly_white",
        barmode="group",
        height=160 + 60 * len(names),
        xaxis_title="importance (each evaluator sums to 1)",
        title={"text": table.title, "font": {"size": 13}},
        margin={"t": 60, "l": 160},
    )
    return figure


def _rgba(colour: str, alpha: float) -> str:
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha})"


def parallel_figure(runs: Sequence[Run], ranking: Ranking) -> Any | None:
    """An axis per differing override but the seed and one for the final metric, a line per run that has
    it, coloured by the metric (the best brightest); None when no override differs."""
    import plotly.graph_objects as go

    shown = [run for run in runs if _finite(metric_value(run, ranking))]
    # The seed is a repeat, not a choice: its spread shows on the metric's own axis.
    keys = [key for key in differing_keys(shown) if key != SEED]
    if not keys:
        return None
    values = [metric_value(run, ranking) for run in shown]
    dimensions = [axis(key, [run.overrides.get(key) for run in shown]) for key in keys]
    label = f"final {ranking.metric}" if ranking.at is None else ranking.quantity
    dimensions.append({"label": label, "values": values})
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
