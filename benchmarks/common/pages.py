"""What the experiment scripts (benchmarks/experiment_*.py) share: their arguments, training a
run (or reusing it when an earlier call finished it), and writing a docs/experiments/ page with
its commands, tables, plots, the machine and the wall time.

Each script answers one question with real runs through xfmr's Python API and writes one page.
`--quick` shrinks every run to a few steps of a tiny model, so the tests run each script end to
end and the pages cannot rot; a quick page says it is no result.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import re
import shlex
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .cli import add_shakespeare, script_parser
from .xfmr_runs import QUIET

ROOT = Path(__file__).resolve().parents[2]

# A quick run: the same composition shrunk to seconds (the tests' size), never a figure. A fixed
# peak FLOP/s: measuring it takes both cores for a second or two, and a busy machine (a test
# suite) would measure it again for every run.
QUICK = ("size=tiny", "data.val_batches=4", "trainer.val_check_interval=5", "data.batch_size=4",
         "throughput.peak_tflops=1")  # fmt: skip


# How a script's runs train: quietly, the script printing a line per run.
PLUMBING = (*QUIET, "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false")


def arguments(
    name: str,
    doc: str,
    *,
    steps: int,
    seeds: int,
    more: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The command line every experiment script takes; `doc` is its module docstring; `more`
    adds a script's own arguments to the parser."""
    parser = script_parser(doc)
    add_shakespeare(parser)
    if more is not None:
        more(parser)
    parser.add_argument(
        "--runs", type=Path, default=ROOT / "outputs" / "experiments" / name,
        help="where the runs go; a finished run found there is reused (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--page", type=Path, default=ROOT / "docs" / "experiments",
        help="the directory the page and its plots are written to (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=steps, help="training steps per run")
    parser.add_argument("--seeds", type=int, default=seeds, help="seeds per setting")
    parser.add_argument("--quick", action="store_true", help="a few steps of a tiny model")
    args = parser.parse_args()
    if args.quick:
        args.steps = min(args.steps, 20)
        args.seeds = min(args.seeds, 2)
    args.started = time.time()
    args.command = " ".join(
        ["python", str(Path(sys.argv[0]).resolve().relative_to(ROOT))]
        + [shlex.quote(_beside(a)) for a in sys.argv[1:]]
    )
    _quiet()
    return args


def _beside(argument: str) -> str:
    """A path beside the repository (../shared/...) as the page's reader, in the repository,
    would type it."""
    path = Path(argument)
    if path.is_absolute() and path.is_relative_to(ROOT.parent) and path.exists():
        return os.path.relpath(path, ROOT)
    return argument


def _quiet() -> None:
    """Runs log to their own train.log; the console gets one line per run from the script."""
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)  # xfmr.train sets the root logger to INFO for train.log
    logging.getLogger().addHandler(console)
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")


def trained(run_dir: Path, overrides: Sequence[str], *, quick: bool) -> Any:
    """The run of `overrides` in `run_dir`: reused when a call before finished it (same
    overrides), else trained (resumed, if one was stopped). A run that fails is returned as
    it ended: a diverging setting is a result, not a crash."""
    import xfmr
    from xfmr.errors import RunFailed

    given = with_quick(overrides, quick=quick)
    every = [*given, f"hydra.run.dir={run_dir}", *PLUMBING]
    if (run_dir / "results.json").is_file():
        run = xfmr.open_run(run_dir)
        if run.status in ("completed", "failed") and _same(run.overrides, every):
            return run
    started = time.perf_counter()
    try:
        run = xfmr.train(xfmr.compose(*every))
    except RunFailed as e:
        run = e.run
    shown = run.metrics.get("val/loss")
    value = f"val/loss {shown:.4f}" if isinstance(shown, float) else "no val/loss"
    print(f"  {run_dir.name}: {run.status}, {value}, {time.perf_counter() - started:.0f} s")
    return run


def experiment_overrides(run: Any) -> list[str]:
    """The overrides that make `run` the experiment it is: its own, less where it went and how
    quietly it trained."""
    return [o for o in run.overrides if o not in PLUMBING and not o.startswith("hydra.run.dir=")]


def with_quick(overrides: Sequence[str], *, quick: bool) -> list[str]:
    """`overrides`, with quick mode's in place of the script's for the keys both set."""
    by_key = {o.split("=", 1)[0]: o for o in [*overrides, *(QUICK if quick else ())]}
    return list(by_key.values())


def _same(recorded: Sequence[str], wanted: Sequence[str]) -> bool:
    """results.json's overrides are `wanted` (which also names the run directory, which
    results.json leaves out)? A path is compared as the file it names, so that a page's command
    typed with a relative `--data` reuses runs made with an absolute one."""
    wanted = [o for o in wanted if not o.startswith("hydra.run.dir=")]
    return sorted(map(_resolved, recorded)) == sorted(map(_resolved, wanted))


def _resolved(override: str) -> str:
    """`key=PATH` with PATH made absolute where it names a file; any other override as given."""
    key, equals, value = override.partition("=")
    if equals and key.endswith("path") and value and Path(value).exists():
        return f"{key}={Path(value).resolve()}"
    return override


def machine(runs: Sequence[Any] = ()) -> str:
    """The machine the figures come from, in one line; the threads torch trained `runs` with
    (their results.json's), else this process's."""
    import torch

    from xfmr.training.throughput import cpu_model

    used = sorted({r.results["threads"] for r in runs if r and r.results.get("threads")})
    threads = "/".join(map(str, used)) if used else str(torch.get_num_threads())
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} with "
        f"{threads} thread{'s' * (threads != '1')}, fp32, Python {platform.python_version()}"
    )


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"
        return "-" if value is None else str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def shown_block(text: str, lang: str = "text") -> str:
    """A code block the page shows and nothing runs (a command that trains for hours, xfmr's own
    words): fenced and marked `illustrative`, as every block of the docs is marked
    (tests/docs/test_doc_blocks.py); the fence outlasts any run of backticks in `text`."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang} illustrative\n{text}\n{fence}"


def compared_table(frame: Any, keys: Sequence[str], *, timing: bool = True) -> str:
    """`xfmr.compare`'s grouped DataFrame, narrowed to what a reader of the page needs: the
    setting, n, the final metric's mean with its 95% t interval and, with a baseline, the
    difference to it with its interval, the test that gave it (paired over shared seeds, else
    Welch's: `xfmr.runs.compare.baseline`) and the Holm-corrected p-value."""
    columns = list(frame.columns)
    mean, low, high = (column(frame, "final", end) for end in ("mean", "low", "high"))
    header = [*keys, "n", f"{mean.removesuffix(' mean')} (95% t interval)"]
    has_baseline = "Δ vs baseline" in columns
    if has_baseline:
        header += ["Δ vs baseline (95% interval)", "test", "p (Holm)", "significant"]
    header += ["ms/step", "params", "note"] if timing else ["params", "note"]
    rows = []
    for record in frame.to_dict("records"):
        row = [record[k] for k in keys] + [record["n"], interval(record[mean], record[low],
                                                                  record[high])]  # fmt: skip
        if has_baseline:
            delta = interval(record["Δ vs baseline"], record[column(frame, "Δ", "low")],
                              record[column(frame, "Δ", "high")], signed=True)  # fmt: skip
            test = record.get("test")
            test = test if isinstance(test, str) else "-"  # the baseline's: none (NaN)
            row += [delta, test, _number(record["p (Holm)"]), record["significant"]]
        if timing:
            row.append(_number(record.get("ms/step"), ".1f"))
        row += [record.get("params"), record.get("note")]
        rows.append(row)
    return markdown_table(header, rows)


def column(frame: Any, start: str, end: str = "") -> str | None:
    """The first of `xfmr.compare`'s columns whose name starts with `start` and ends with `end`
    ("final val/loss mean", ...), None if there is none."""
    return next((c for c in frame.columns if c.startswith(start) and c.endswith(end)), None)


def welch_difference(values: Sequence[float], others: Sequence[float]) -> str:
    """mean(values) - mean(others) with Welch's 95% interval; the difference alone where a side
    has fewer than two values, "-" where one has none."""
    from xfmr.runs.compare.stats import welch

    if not values or not others:
        return "-"
    found = welch(values, others)
    if found is None:
        return f"{sum(values) / len(values) - sum(others) / len(others):+.3f}"
    return f"{found.delta:+.3f} [{found.low:+.3f}, {found.high:+.3f}]"


def plot_axes(rows: int = 1, columns: int = 1, **figure: Any) -> tuple[Any, Any]:
    """(figure, axes) of one plot, 7 x 4 inches, drawn off screen: a page's plot; or, given
    rows and columns, a grid of them (an array of axes), sized by `figure`'s keywords."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if (rows, columns) == (1, 1):
        return plt.subplots(figsize=(7, 4), layout="constrained")
    return plt.subplots(rows, columns, squeeze=False, layout="constrained", **figure)


def unigram_loss(data: Path, val_fraction: float) -> float:
    """The entropy (nats) of the character frequencies of the validation split, the text's
    last `val_fraction` as xfmr cuts it: the loss of a model that learned only how often each
    letter occurs, and knew the split's own frequencies."""
    text = data.read_text(encoding="utf-8")
    val = text[int(len(text) * (1.0 - val_fraction)) :]
    counts = Counter(val)
    return -sum(n / len(val) * math.log(n / len(val)) for n in counts.values())


def run_vocab_size(run: Any) -> int:
    """The vocabulary of the tokenizer `run` (an `xfmr.Run`) saved."""
    from xfmr.run_dir.files import TOKENIZER_FILE
    from xfmr.text.tokenizers import TextTokenizer

    return TextTokenizer.load(run.path / TOKENIZER_FILE).vocab_size


def fresh_model(run: Any, vocab_size: int | None = None) -> Any:
    """The model `run`'s config describes (as configured: runs saved before positions moved
    under `model` are read too), with fresh weights, at `vocab_size` (default: the run's)."""
    from xfmr.nn.models import build_model

    vocab_size = run_vocab_size(run) if vocab_size is None else vocab_size
    return build_model(run.config.model.with_vocab(vocab_size))


def _number(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None or value != value else format(value, spec)  # NaN != NaN


def interval(mean: Any, low: Any, high: Any, *, signed: bool = False) -> str:
    """'mean [low, high]', the mean alone without an interval, '-' without a mean."""
    if mean is None or mean != mean:
        return "-"
    shown = f"{mean:+.3f}" if signed else f"{mean:.3f}"
    if low is None or low != low:
        return shown
    return f"{shown} [{low:.3f}, {high:.3f}]"


TESTS_LABEL = "**Tests:**"  # the line of a page that names its script's tests


class Page:
    """A markdown page and the PNGs beside it (docs/experiments/NAME.md, NAME/*.png)."""

    def __init__(
        self, args: argparse.Namespace, name: str, title: str, question: str, *, tests: str
    ) -> None:
        """`tests`: the statistical tests the script makes, in one sentence (its TESTS), shown
        under the question as a `**Tests:**` line; tests/docs/test_experiment_pages.py holds
        every page's line to its script's."""
        self.args = args
        self.path = args.page / f"{name}.md"
        self.figures = args.page / name
        self.figures.mkdir(parents=True, exist_ok=True)
        self.parts = [f"# {title}", question, f"{TESTS_LABEL} {tests}"]
        if args.quick:
            self.parts.append(
                "> Quick mode: a tiny model for a few steps, to test the script. No figure here "
                "is a result."
            )
        self.parts.append(f"Produced by:\n\n{shown_block(args.command, 'console')}")

    def add(self, *texts: str) -> None:
        self.parts.extend(texts)

    def figure(self, figure: Any, name: str, caption: str) -> None:
        """Save a matplotlib figure as NAME.png beside the page and show it there."""
        import matplotlib.pyplot as plt

        path = self.figures / f"{name}.png"
        figure.savefig(path, dpi=90, bbox_inches="tight")
        plt.close(figure)
        self.drawn(path, caption)

    def drawn(self, path: Path, caption: str) -> None:
        """Show a PNG already written beside the page, its caption under it."""
        self.parts.append(f"![{caption}]({self.figures.name}/{path.name})\n\n*{caption}*")

    def write(self, runs: Sequence[Any], *, steps: str | None = None) -> Path:
        """The page, ending with the machine and the wall time; `steps` says how many steps the
        runs took where they did not all take --steps ("200 or 800")."""
        trained_s = sum(run.results.get("wall_time_s") or 0.0 for run in runs if run)
        minutes = (time.time() - self.args.started) / 60
        self.parts.append(
            "## Machine and time\n\n"
            f"{machine(runs)}. {len(runs)} run{'s' * (len(runs) != 1)} of {steps or self.args.steps} "
            "steps, "
            f"{trained_s / 60:.1f} min of training by the runs' own results.json "
            f"(wall_time_s); this script's last call took {minutes:.1f} min (runs it found "
            f"finished are reused, not retrained); load average {os.getloadavg()[1]:.1f} over the "
            "last 5 minutes of it. Runs: `" + _shown(self.args.runs) + "`."
        )
        self.path.write_text("\n\n".join(self.parts) + "\n")
        print(f"page: {self.path}")
        return self.path


def _shown(path: Path) -> str:
    """A path under the repository relative to it, any other as it is."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
