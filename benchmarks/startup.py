"""Where `xfmr-train`'s seconds go between the command and the first training step.

    python benchmarks/startup.py                    # the default experiment, 5 starts
    python benchmarks/startup.py --runs 3 -- experiment=nanogpt_shakespeare_char data.path=PATH

Each start is a new interpreter running `xfmr.cli.train`'s real `main()` with the given
overrides (and a run directory of its own), in which a few of xfmr's and Lightning's functions
are wrapped to stamp the wall clock as they start and end. The heavy imports (torch, Lightning,
xfmr.training) happen where the CLI does them, just timed on their own. A callback ends the
process at the start of the first training step. The first start builds the caches (tokenizer,
token cache, matmul peak) in a cache directory kept for the rest, so "first" is a person's
first run and "then" the median of the later ones, as a person's next run.

Phases, in order:
- python + CLI imports: from the process's start (its start time in /proc) to `xfmr.cli.train`
  imported: the interpreter, Hydra and OmegaConf.
- compose: `main()` to `run_config`: Hydra reads the command line and the config tree.
- check: `xfmr.config.make.run_config`: the composed config read into the run's typed config,
  every section checked and the run's own choices resolved.
- lock + config tree: to the heavy imports: the run directory locked, the config printed.
- torch + Lightning imports: `import xfmr.training.run` (in `xfmr.api.training.fit`).
- data module, tokenizer, model: the parts (`build_parts`, in its order), the tokenizer trained
  or read from the cache, the model with fresh weights.
- module + loggers: the LightningModule, loggers and callbacks, up to `Trainer(...)`.
- Trainer(...): its constructor.
- token cache: the data module's `setup` (tokens encoded, or memory-mapped from the cache).
- fit set-up: the rest of `Trainer.fit` before the first step (the matmul peak, the model
  summary, the optimizer).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from common.cli import script_parser
from common.xfmr_runs import child_env

PHASES = [
    ("python + CLI imports", "start", "cli"),
    ("compose", "main", "check"),
    ("check", "check", "check_end"),
    ("lock + config tree", "check_end", "imports"),
    ("torch + Lightning imports", "imports", "imports_end"),
    ("data module", "data", "data_end"),
    ("tokenizer", "tokenizer", "tokenizer_end"),
    ("model", "tokenizer_end", "parts_end"),
    ("module + loggers", "parts_end", "trainer"),
    ("Trainer(...)", "trainer", "trainer_end"),
    ("token cache", "setup", "setup_end"),
    ("fit set-up", "fit", "first_step"),
]


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--runs", type=int, default=5, help="starts; the first builds the caches")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="xfmr-train overrides (after --)")
    args = parser.parse_args()
    if args.child:
        return child(Path(args.child), args.overrides)
    with tempfile.TemporaryDirectory(prefix="xfmr-startup-") as scratch:
        runs = [start(Path(scratch), i, args.overrides) for i in range(args.runs)]
    table(runs, args.overrides)


def start(scratch: Path, index: int, overrides: list[str]) -> dict[str, float]:
    marks_file = scratch / f"marks-{index}.json"
    run_dir = scratch / f"run-{index}"
    env = child_env(scratch / "cache", PYTHONUNBUFFERED="1")
    command = [
        sys.executable,
        __file__,
        f"--child={marks_file}",
        "--",
        *overrides,
        f"hydra.run.dir={run_dir}",
        "+callbacks.first_step._target_=__main__.FirstStep",
        f"+callbacks.first_step.marks_file={marks_file}",
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=scratch)
    if not marks_file.exists():
        sys.exit(f"start {index} did not reach its first step:\n{done.stdout}\n{done.stderr}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return json.loads(marks_file.read_text())


def table(runs: list[dict[str, float]], overrides: list[str]) -> None:
    def seconds(marks: dict[str, float], a: str, b: str) -> float:
        return marks[b] - marks[a] if a in marks and b in marks else 0.0

    first, then = runs[0], runs[1:] or runs
    print(f"xfmr-train {' '.join(overrides) or '(default experiment)'}: command to first step")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}; 'then': median of {len(then)} starts"
    )
    print("| phase | first start (s) | then (s) |\n|---|---:|---:|")
    for name, a, b in PHASES:
        later = statistics.median(seconds(m, a, b) for m in then)
        print(f"| {name} | {seconds(first, a, b):.2f} | {later:.2f} |")
    total = statistics.median(seconds(m, "start", "first_step") for m in then)
    print(f"| **total** | **{seconds(first, 'start', 'first_step'):.2f}** | **{total:.2f}** |")


# ---------------------------------------------------------------- the child: one start


MARKS: dict[str, float] = {}


def child(marks_file: Path, overrides: list[str]) -> None:
    MARKS["start"] = process_start_time()
    import xfmr.cli.train as cli

    MARKS["cli"] = time.time()
    import xfmr.api.composing as composing  # where the CLI reads its config, through xfmr.api

    _stamp(composing, "run_config", "check")
    import xfmr.run_dir.lock as lock  # the CLI's job takes it, then imports the heavy parts

    hold_run_dir = lock.hold_run_dir

    @contextmanager
    def timed_hold(run_dir):
        with hold_run_dir(run_dir):
            MARKS["imports"] = time.time()
            import lightning

            import xfmr.parts.build as build
            import xfmr.training.run  # noqa: F401 - what the CLI imports here

            MARKS["imports_end"] = time.time()
            _stamp(build, "prepare_tokenizer", "tokenizer")
            _stamp(build, "data_module", "data", wrap_setup=True)
            _stamp(xfmr.training.run, "build_parts", "parts")
            _stamp(lightning.Trainer, "__init__", "trainer")
            _stamp(lightning.Trainer, "fit", "fit")
            yield

    lock.hold_run_dir = timed_hold
    sys.argv = ["xfmr-train", *overrides]
    MARKS["main"] = time.time()
    cli.main()


def _stamp(owner, name: str, mark: str, wrap_setup: bool = False) -> None:
    """Wrap `owner.name` (a class's or an object's) to stamp `mark` as it starts and `mark_end`
    as it returns."""
    original = getattr(owner, name)

    def stamped(*args, **kwargs):
        MARKS.setdefault(mark, time.time())
        result = original(*args, **kwargs)
        MARKS.setdefault(f"{mark}_end", time.time())
        if wrap_setup:  # the data module it returned: its setup, the token cache
            _stamp(result, "setup", "setup")
        return result

    setattr(owner, name, stamped)


def process_start_time() -> float:
    """This process's start, wall clock: its start in clock ticks after boot (/proc)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


class FirstStep:
    """Ends the process as the first training step starts, after writing the marks."""

    def __new__(cls, marks_file: str):
        from lightning.pytorch.callbacks import Callback

        class _FirstStep(Callback):
            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
                MARKS["first_step"] = time.time()
                Path(marks_file).write_text(json.dumps(MARKS))
                sys.stdout.flush()
                os._exit(0)

        return _FirstStep()


if __name__ == "__main__":
    main()
