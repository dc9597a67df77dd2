"""A sweep job's start-up: a 16-job grid of 20-step runs beside the same runs in one process.

    python benchmarks/sweep_startup.py --launcher forkserver spawn

For each start method of xfmr's launcher (`hydra.launcher.start_method`) it runs
`xfmr-train -m ... seed=1..16` (tiny model, a small text corpus the script writes, one worker)
and times the whole command; then one process that composes the same 16 configs and calls
`xfmr.training.run.run_training` on each in a loop, timed as a whole command too. A callback
records the wall clock at each run's first training step, so the table also shows, per job, the
time from its launch (the sweep's `job N started` line) or its `run_training()` call to that
step: the start-up is the sweep's figure less the in-process one. Every run is given
`throughput.peak_tflops` so none spends time measuring the CPU's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import lightning as L

from common.cli import script_parser
from common.xfmr_runs import child_env, run_timed, train_command, train_config

CORPUS = (
    "the quick brown fox jumps over the lazy dog.\n"
    "a small cat sees a big bird near the river.\n"
    "two owls watch the quiet moon at night.\n"
) * 40
FIRST_STEP_FILE = "first_step.txt"
ONE_PROCESS_FILE = "one_process.json"  # what the runs in one process measured


class FirstStep(L.Callback):
    """Writes the wall clock at the run's first training step to RUN_DIR/first_step.txt."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = Path(run_dir)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == 0 and batch_idx == 0:
            (self.run_dir / FIRST_STEP_FILE).write_text(repr(time.time()))


def run_overrides(corpus: Path, steps: int) -> list[str]:
    return [
        "data=text",
        f"data.path={corpus}",
        "size=tiny",
        "data.block_size=16",
        "data.batch_size=4",
        f"trainer.max_steps={steps}",
        "schedule.warmup_steps=1",
        f"trainer.val_check_interval={steps}",
        "trainer.limit_val_batches=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_progress_bar=false",
        "callbacks.progress_bar=null",
        "callbacks.text_sample=null",
        "logger=none",
        "throughput.peak_tflops=1",
        "+callbacks.first_step._target_=sweep_startup.FirstStep",
        "+callbacks.first_step.run_dir=${paths.output_dir}",
    ]


def sweep(out: Path, corpus: Path, args: argparse.Namespace, start_method: str) -> dict:
    sweep_dir = out / f"sweep_{start_method}"
    cmd = train_command(
        "-m",
        *run_overrides(corpus, args.steps),
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.launcher.start_method={start_method}",
        f"hydra.sweeper.workers={args.workers}",
        f"seed=range(1,{args.jobs + 1})",
    )
    env = child_env(out / "cache", callbacks=True)  # the callback: this script's FirstStep
    output, wall = run_timed(cmd, env=env)
    launched = _launch_times(output)
    to_first_step = [_first_step(sweep_dir / str(num)) - launched[num] for num in range(args.jobs)]
    return {"how": f"sweep, {start_method}", "wall": wall, "to_first_step": to_first_step}


def _launch_times(console: str) -> dict[int, float]:
    """Each job's `job N started` line, with the time Hydra's logging put before it."""
    pattern = re.compile(r"^\[([\d-]+ [\d:,]+)\]\[\w+\] job (\d+) started", re.MULTILINE)
    return {
        int(num): datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for stamp, num in pattern.findall(console)
    }


def _first_step(run_dir: Path) -> float:
    return float((run_dir / FIRST_STEP_FILE).read_text())


def in_process(out: Path, corpus: Path, args: argparse.Namespace) -> dict:
    """This script again, in a process of its own that trains the 16 runs one after another."""
    cmd = [sys.executable, __file__, "--one-process", str(out), "--steps", str(args.steps)]
    cmd += ["--jobs", str(args.jobs)]
    env = child_env(out / "cache", callbacks=True)  # the callback: this script's FirstStep
    _, wall = run_timed(cmd, env=env)
    measured = json.loads((out / ONE_PROCESS_FILE).read_text())
    return {"how": "one process", "wall": wall, **measured}


def train_in_one_process(out: Path, steps: int, jobs: int) -> None:
    from xfmr.training.run import run_training

    corpus = out / "corpus.txt"
    train_s, to_first_step = 0.0, []
    for num in range(jobs):
        run_dir = out / "one_process" / str(num)
        overrides = [*run_overrides(corpus, steps), f"seed={num + 1}"]
        cfg = train_config([*overrides, f"paths.root_dir={out}", f"paths.output_dir={run_dir}"])
        started = time.time()
        run_training(cfg)
        train_s += time.time() - started
        to_first_step.append(_first_step(run_dir) - started)
    (out / ONE_PROCESS_FILE).write_text(
        json.dumps({"train_s": train_s, "to_first_step": to_first_step})
    )


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--launcher", nargs="+", default=["forkserver", "spawn"])
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_sweep_startup"))
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--one-process", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_process:
        return train_in_one_process(args.one_process, args.steps, args.jobs)
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"--out {args.out} is not empty: a sweep there would resume, not start")
    args.out.mkdir(parents=True, exist_ok=True)
    corpus = args.out / "corpus.txt"
    corpus.write_text(CORPUS)
    baseline = in_process(args.out, corpus, args)
    rows = [sweep(args.out, corpus, args, method) for method in args.launcher]
    first_step = statistics.median(baseline["to_first_step"])
    print(f"{args.jobs} jobs of {args.steps} steps, workers={args.workers}, {os.cpu_count()} CPUs")
    print("| how | wall s | wall s per job | launch to first step s (median) | start-up s |")
    print("|---|--:|--:|--:|--:|")
    for row in [baseline, *rows]:
        median = statistics.median(row["to_first_step"])
        print(
            f"| {row['how']} | {row['wall']:.1f} | {row['wall'] / args.jobs:.2f} | "
            f"{median:.2f} | {median - first_step:.2f} |"
        )
    print(f"in one process: run_training() {baseline['train_s']:.1f} s of {baseline['wall']:.1f} s")
    for row in rows:
        extra = (row["wall"] - baseline["wall"]) / args.jobs
        print(f"{row['how']}: {extra:+.2f} s per job beyond one process (wall)")


if __name__ == "__main__":
    main()
