"""step_overhead.py's tables: each row's time per step against the first row's, each row
against the plain loop stepped beside it in its own process (the ratio drift cannot move), and
the callbacks each xfmr-train row ran.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from importlib.metadata import version
from typing import Any

from common.cli import command_line
from overhead.plain_loops import SHAPE

GOAL = 1.10  # xfmr-train's default row over the plain loop, mean time per step


def step_ms(times: list[float], warmup: int) -> tuple[float, float]:
    """(mean, median) ms per step over the steps after `warmup`; times[i] ends step i + 1."""
    timed = times[warmup - 1 :]
    intervals = [b - a for a, b in zip(timed, timed[1:], strict=False)]
    return 1000 * (timed[-1] - timed[0]) / len(intervals), 1000 * statistics.median(intervals)


def print_header(args: argparse.Namespace, measured: dict[str, list[dict[str, Any]]]) -> None:
    records = [record for runs in measured.values() for record in runs]
    threads = sorted({record["threads"] for record in records})
    steps = args.steps - args.warmup
    print("# Host work per training step: xfmr-train against a plain PyTorch loop\n")
    print(f"    {command_line()}\n")
    from xfmr.training.throughput import cpu_model

    print(f"- machine: {cpu_model()}, {os.cpu_count()} cores (load average "
          f"{args.load_before:.2f} before the runs, {os.getloadavg()[0]:.2f} after); torch "
          f"{version('torch')}, lightning {version('lightning')}, Python "
          f"{platform.python_version()}; torch threads in the runs: "
          f"{', '.join(map(str, threads))}")  # fmt: skip
    print(f"- GPT of {SHAPE.n_layers} layers, d_model {SHAPE.d_model}, {SHAPE.n_heads} heads, "
          f"block {SHAPE.block_size}, batch {SHAPE.batch_size}, float32, CPU; {args.steps} steps, "
          f"steps {args.warmup + 1}..{args.steps} timed ({steps}); each figure the median of "
          f"{args.rounds} round(s); xfmr-train's output to "
          f"{'a pseudo-terminal' if args.tty else 'a file'}\n")  # fmt: skip


def print_table(measured: dict[str, list[dict[str, Any]]], warmup: int) -> None:
    print("| row | ms/step, mean | ms/step, median | mean vs row 1 | adds (µs/step) | "
          "mean per round |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|")
    reference = previous = None
    for name, runs in measured.items():
        means, medians = zip(*(step_ms(run["times"], warmup) for run in runs), strict=True)
        mean, median = statistics.median(means), statistics.median(medians)
        reference = reference or mean
        adds = "" if previous is None else f"{1000 * (mean - previous):+.0f}"
        per_round = ", ".join(f"{m:.2f}" for m in means)
        print(f"| {name} | {mean:.2f} | {median:.2f} | {mean / reference:.2f} | {adds} | "
              f"{per_round} |")  # fmt: skip
        previous = mean
    print_paired(measured, warmup)
    print_split(measured, warmup)
    print("\nThe callbacks of each xfmr-train row (Lightning's order):")
    for name, runs in measured.items():
        if "callbacks" in runs[-1]:
            workers = runs[-1]["data_workers"]
            print(f"- {name}: {', '.join(runs[-1]['callbacks'])} (data workers: {workers})")


def print_paired(measured: dict[str, list[dict[str, Any]]], warmup: int) -> None:
    """Each row but the first against the plain loop over nanoGPT's model stepped beside it in
    the same process: the ratio that drift on a shared machine cannot move, as both are timed
    at the same moments."""
    print("\nEach row beside a step of the plain loop over nanoGPT's model after each of its "
          "steps, in its own process (means, ms/step; the ratio's median over rounds):\n")  # fmt: skip
    print("| row | the row | plain loop beside it | ratio | ratios per round |")
    print("|---|---:|---:|---:|---|")
    ratio = None
    for name, runs in measured.items():
        if not runs[0].get("paired"):
            continue
        pairs = [paired_ms(run, warmup) for run in runs]
        ratios = [ours / plain for ours, plain in pairs]
        ratio = statistics.median(ratios)
        ours = statistics.median(p[0] for p in pairs)
        plain = statistics.median(p[1] for p in pairs)
        print(f"| {name} | {ours:.2f} | {plain:.2f} | {ratio:.2f} | "
              f"{', '.join(f'{r:.2f}' for r in ratios)} |")  # fmt: skip
    if ratio is not None:
        verdict = "met" if ratio <= GOAL else "not met"
        print(f"\nGoal: the default row at {GOAL:.2f}x the plain loop or less: {ratio:.2f}x, "
              f"{verdict}.")  # fmt: skip


def paired_ms(record: dict[str, Any], warmup: int) -> tuple[float, float]:
    """(xfmr-train's mean ms/step, the paired plain step's mean) over the timed steps."""
    mean, _ = step_ms(record["times"], warmup)
    plain = record["paired"][warmup - 1 : -1]
    return mean, 1000 * statistics.fmean(plain)


def print_split(measured: dict[str, list[dict[str, Any]]], warmup: int) -> None:
    """Each Lightning row's step cut where Lightning's hooks fall, beside the plain loop's step
    (each a mean over the timed steps, the median over rounds): what the loop costs between
    steps, around the module's training step, and inside it."""
    rows = {name: runs for name, runs in measured.items() if runs[0].get("starts")}
    if not rows:
        return
    print("\nEach Lightning row's step, split (µs/step): from the last step's end to "
          "`on_train_batch_start` (loop bookkeeping, fetcher, DataLoader, collate); around "
          "the module's `training_step` (the strategy's call, hooks); inside it; and the plain "
          "loop's whole step beside it. Under Lightning's automatic optimization the "
          "training step is the forward alone, the backward and update run around it:\n")  # fmt: skip
    print("| row | between steps | around the step | in the step | plain step | in the step "
          "- plain step |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs in rows.items():
        parts = [split_us(run, warmup) for run in runs]
        between, around, inside, plain = (statistics.median(p[i] for p in parts) for i in range(4))
        print(f"| {name} | {between:.0f} | {around:.0f} | {inside:.0f} | {plain:.0f} | "
              f"{inside - plain:+.0f} |")  # fmt: skip


def split_us(record: dict[str, Any], warmup: int) -> tuple[float, float, float, float]:
    """(between steps, around the training step, in it, the plain step) in µs, means over the
    steps after `warmup`; step i + 1 starts at starts[i] and ends at times[i]."""
    ends, starts, inside = record["times"], record["starts"], record["in_step"]
    timed = range(warmup, len(ends))
    between = [starts[i] - ends[i - 1] for i in timed]
    around = [ends[i] - starts[i] - inside[i] for i in timed]
    plain = record["paired"][warmup:] or [0.0]
    mean = statistics.fmean
    return tuple(1e6 * mean(x) for x in (between, around, [inside[i] for i in timed], plain))
