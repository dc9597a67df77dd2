"""`xfmr-compare PATH...`: runs or sweep directories in, one table out (and, when asked, the
metric's curves as a PNG and a self-contained HTML page).

It reads only the files runs leave behind, so runs copied from any machine compare; torch never
loads, and matplotlib or plotly only for --plot or --html.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from xfmr.api.comparing import AXES, FORMATS
from xfmr.cli.common import fail
from xfmr.errors import UserError

PROG = "xfmr-compare"
PLOT_SUFFIXES = (".png", ".svg", ".pdf")
EXAMPLES = """examples:
  xfmr-compare outputs/sweeps/pos                      one row per setting, mean ± std over seeds
  xfmr-compare outputs/sweeps/pos --no-group           one row per run
  xfmr-compare outputs/sweeps/pos --baseline pos=learned   each setting against learned
  xfmr-compare outputs/sweeps/pos --baseline pos=learned --equivalence 0.01 --detect 0.02
  xfmr-compare runs/a runs/b --metric val/ppl --format markdown
  xfmr-compare outputs/sweeps/pos --plot pos.png --html pos.html
  xfmr-compare outputs/sweeps/size --at flops=1e15     each run at the same training FLOPs
  xfmr-compare outputs/sweeps/size --at time=600 --plot size.png --x time
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
    _add_statistics(parser)
    _add_outputs(parser)
    return parser


def _add_statistics(parser: argparse.ArgumentParser) -> None:
    """The baseline each setting is tested against, and the budget the metric is read at."""
    parser.add_argument(
        "--baseline",
        metavar="KEY=VALUE",
        help="the setting every other is compared with, e.g. pos=learned (several keys: "
        "pos=learned,model.n_layers=4): the difference of means with its 95%% CI, effect size "
        "and p-value, Holm-corrected over the settings; by the paired t-test over shared seeds "
        "where every seed of the baseline ran in the setting, else Welch's",
    )
    parser.add_argument(
        "--equivalence",
        type=float,
        metavar="MARGIN",
        help="with --baseline: two one-sided tests (TOST) of whether each setting's difference "
        "lies within ±MARGIN (the metric's units), Holm-corrected: equivalent, different or "
        "not shown",
    )
    parser.add_argument(
        "--detect",
        type=float,
        metavar="DELTA",
        help="with --baseline: the seeds per setting that would detect a difference of DELTA "
        "with 80%% power, from the observed spread (noncentral t)",
    )
    parser.add_argument(
        "--at",
        metavar="KIND=N",
        help="read each run's metric at an equal budget rather than at its end: step=N, "
        "tokens=N, flops=N (training tokens and FLOPs over all processes; 2e8, 1.5e15) or "
        "time=S (training seconds, validation excluded), interpolated linearly between the "
        "validations around it; runs that never got there are named below the table",
    )


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    """What is written: the table's format, the curves' plot, the HTML page."""
    parser.add_argument("--format", choices=FORMATS, default="table", help="how to print the table")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="write the metric's curves")
    parser.add_argument(
        "--x",
        choices=tuple(AXES),
        help="the x-axis of --plot's curves (default: --at's kind, else step); the --html page "
        "switches between them",
    )
    parser.add_argument(
        "--html", type=Path, metavar="FILE.html", help="write a self-contained page"
    )


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
    from xfmr.api.comparing import report

    report(
        args.paths,
        metric=args.metric,
        mode=args.mode,
        group_by=args.group_by,
        group=not args.no_group,
        baseline=args.baseline,
        equivalence=args.equivalence,
        detect=args.detect,
        at=args.at,
        form=args.format,
        plot=args.plot,
        html=args.html,
        axis=args.x,
    )


if __name__ == "__main__":
    main()
