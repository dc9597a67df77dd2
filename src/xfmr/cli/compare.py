"""`xfmr-compare PATH...`: runs or sweep directories in, one table out (and, when asked, the
metric's curves as a PNG and a self-contained HTML page).

It reads only the files runs leave behind, so runs copied from any machine compare; torch never
loads, and matplotlib or plotly only for --plot or --html.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from xfmr.cli.common import fail
from xfmr.errors import UserError
from xfmr.runs.compare.formats import FORMATS, render
from xfmr.runs.compare.runs import Run, find_runs, metric_names, optimized_metric, sweep_direction
from xfmr.runs.compare.table import Ranking, Table, group_table, grouping_keys, run_table

PROG = "xfmr-compare"
DEFAULT_METRIC = "val/loss"
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
EXAMPLES = """examples:
  xfmr-compare outputs/sweeps/pos                      one row per setting, mean ± std over seeds
  xfmr-compare outputs/sweeps/pos --no-group           one row per run
  xfmr-compare runs/a runs/b --metric val/ppl --format markdown
  xfmr-compare outputs/sweeps/pos --plot pos.png --html pos.html
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        fail(PROG, f"{message} (see {PROG} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Compare runs of xfmr-train: a row per run or per setting, best first.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run or sweep directories")
    parser.add_argument(
        "--metric",
        help="the metric to rank by (default: the runs' optimized_metric, else val/loss)",
    )
    parser.add_argument(
        "--mode",
        choices=("min", "max"),
        help="whether lower or higher is better (default: the sweep's direction, else min)",
    )
    grouping = parser.add_mutually_exclusive_group()
    grouping.add_argument(
        "--group-by",
        metavar="KEYS",
        help="comma-separated override keys that define a setting (default: every override "
        "that differs between runs, except seed)",
    )
    grouping.add_argument("--no-group", action="store_true", help="one row per run")
    parser.add_argument("--format", choices=FORMATS, default="table", help="how to print the table")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="write the metric's curves")
    parser.add_argument(
        "--html", type=Path, metavar="FILE.html", help="write a self-contained page"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.plot and args.plot.suffix.lower() not in PLOT_SUFFIXES:
        fail(PROG, f"--plot {args.plot}: give a file ending in {', '.join(PLOT_SUFFIXES)}")
    try:
        compare(args)
    except UserError as e:
        fail(PROG, str(e))
    except OSError as e:  # a directory it may not read, a --plot/--html file it may not write
        fail(PROG, f"{e.filename}: {e.strerror}")


def compare(args: argparse.Namespace) -> None:
    runs = find_runs(args.paths)
    metric = choose_metric(runs, args.metric)
    ranking = Ranking(metric, args.mode or sweep_direction(runs, metric) or "min")
    keys = grouping_keys(runs, args.group_by, args.no_group)
    per_run = run_table(runs, ranking)
    tables = [per_run] if keys is None else [group_table(runs, keys, ranking), per_run]
    render(tables[0], args.format)
    if args.plot:
        from xfmr.runs.compare.figures import metric_curves, save_curves_png

        save_curves_png(metric_curves(runs, metric), metric, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.html:
        write_html(args.html, tables, runs, ranking)


def choose_metric(runs: list[Run], requested: str | None) -> str:
    """`--metric` if some run has it; else the metric the runs optimized."""
    if requested is None:
        return optimized_metric(runs) or DEFAULT_METRIC
    available = metric_names(runs)
    if requested not in available:
        have = ", ".join(available) or "none (no run has validated yet)"
        raise UserError(f"--metric {requested}: no run has it; the runs have: {have}")
    return requested


def write_html(path: Path, tables: list[Table], runs: list[Run], ranking: Ranking) -> None:
    from xfmr.runs.compare.figures import metric_curves
    from xfmr.runs.compare.page import write_page

    write_page(
        path, tables=tables, curves=metric_curves(runs, ranking.metric), runs=runs, ranking=ranking
    )
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
