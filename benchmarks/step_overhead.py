"""Host work per training step: xfmr-train against a plain PyTorch loop, at a shape where the
host's work rather than the model's arithmetic decides the time of a step.

    python benchmarks/step_overhead.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt [--steps 300] [--rounds 3] [--profile]

The goal: xfmr-train with its default callbacks and logging at 1.10x the plain loop's mean time
per step or less. The shape: a GPT of 6 layers, d_model 48, 6 heads, block 32, batch 4, no bias,
no dropout, tied embeddings, on the characters of --data; CPU, float32, one thread
(OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1 in every child's environment, and
`torch.set_num_threads(1)` in the plain loops; each row reports the threads torch had).

Rows, each run in a fresh process of its own, all rows once per round (--rounds), so that drift
on a shared machine reaches every row alike; each figure is the row's median over rounds.

1. plain loop, nanoGPT's model: nanoGPT's `GPT` imported from --nanogpt's model.py, trained as
   its train.py trains: a batch of random offsets into the token tensor (x and y stacked),
   nanoGPT's warm-up + cosine lr set every step, `AdamW(fused=True)` with weight decay on
   matrices only (lr 1e-3, betas (0.9, 0.99), weight decay 0.1: the experiment's optim),
   `clip_grad_norm_(..., 1.0)`, `zero_grad(set_to_none=True)`; the loss is read
   (`loss.item()`) every 10th step only, as train.py reads it at its log_interval.
2. plain loop, xfmr's model: the same loop around xfmr's model (`ModelConfig`, built by the clm
   objective) and the loss of the objective's `forward`, as xfmr's training step computes it.
   Rows 1 and 2 differ in the model only; rows 1 and 3 in the loop only.
3. Lightning's loop alone: a LightningModule around nanoGPT's model under a Trainer with
   everything optional off, the same batches, optimizer, schedule and clipping: under
   Lightning's automatic optimization, and again under manual optimization, which is how
   xfmr's training step runs (its `manual_backward`, its optimizer wrapper's `step`). What
   Lightning's own loop costs at this shape, before anything of xfmr's.
4. xfmr-train, bare: `experiment=nanogpt_shakespeare_char` at the shape with every optional part
   off: every entry of xfmr's conf/callbacks/default.yaml null (read from the installed config
   tree), no logger, no checkpoint callback or progress bar of Lightning's own, no model
   summary. What xfmr always adds (its run summary, the signal handling, the non-finite guard)
   stays.
5. the parts added back cumulatively, one per row: csv logging, the checkpoint callbacks (best
   and periodic: the periodic one saves nothing by default but runs its checks every step), the
   lr monitor, and last the progress bar with the rest of the defaults (the model summary and
   any other entry of that file, which act before training): the default config for callbacks
   and logging. Below the table, each row's callbacks as Lightning ran them.

A third table splits each Lightning row's step where Lightning's hooks fall (between one
step's end and the next batch's start, around the module's training step, inside it), beside
the plain loop's whole step: where the loop's own cost lies.

Every xfmr-train row: the shape, `trainer.max_steps` = --steps, one validation of one batch after
the last step (`trainer.val_check_interval` = --steps; outside the timing), no sanity check,
`throughput.peak_tflops=1` (no peak measured), no closing text sample, and the warm-up of the
schedule the plain loops use (`schedule.warmup_steps`).

Timing, the same for every row: `time.perf_counter()` at the end of every step, in the plain loops
after the step, in xfmr-train in `on_train_batch_end` of the callback `StepTimes`
(overhead/step_times.py, added with `+callbacks.step_times`, benchmarks/ on PYTHONPATH). On a
CPU torch's work is synchronous, so the interval between two ends is a step's whole cost:
batch, forward, backward, clipping, update, schedule, logging, callbacks. Steps after --warmup
are timed: `mean` is their total time over their number (what the run takes, the logging steps
every `trainer.log_every_n_steps` = 10 included), `median` the typical step. The ratio compares
means with row 1; "adds" is a row's mean minus the mean of the row above it.

xfmr-train's output goes to a log file beside its run directory, so the progress bar has no
terminal: rich keeps its state but draws nothing until the bar ends. With --tty the xfmr-train
children write to a pseudo-terminal that this script reads, and the bar draws as it would for a
person (rich draws from a thread of its own).

--profile runs the default row once more with cProfile on inside xfmr-train's process (switched
on and off by `StepTimes`, for the timed steps only) and prints microseconds per step in chosen
parts of a step, each the cumulative time of its functions entered from outside them: the parts
nest (the forward runs inside the training step, the clipping inside the optimizer's step) and
do not add up. Then the self time of every function summed by package, which adds up to the
profiled total. cProfile sees the main thread only (not rich's drawing thread) and slows
Python code far more than torch's kernels: compare the parts with each other, not with the
table above.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.cli import add_nanogpt, add_shakespeare, script_parser
from common.xfmr_runs import child_env, shakespeare_run, train_command
from overhead.plain_loops import SHAPE, lr_warmup_steps, plain_loop
from overhead.profiling import print_profile
from overhead.tables import print_header, print_table, step_ms

# The parts the rows add back, in order: (entries of conf/callbacks/default.yaml, the other
# overrides that keep the part off). The bare row has them all off, and every other entry of
# that file too; the last row has them all on, which is the default config.
PARTS = {
    "csv logging": ((), ("logger=none",)),
    "checkpoint callbacks": (
        ("model_checkpoint", "periodic_checkpoint"),
        ("++trainer.enable_checkpointing=false",),  # else Lightning adds a checkpoint callback
    ),
    "lr monitor": (("lr_monitor",), ()),
    "progress bar": (("progress_bar",), ("trainer.enable_progress_bar=false",)),
}
SUMMARY_OFF = ("trainer.enable_model_summary=false", "print_config=false")  # before training
ALWAYS_OFF = "text_sample"  # runs after training
PLAIN_ROWS = {
    "nanogpt": "plain loop, nanoGPT's model",
    "xfmr": "plain loop, xfmr's model",
    "lightning": "Lightning's loop alone, nanoGPT's model",
    "lightning_manual": "Lightning's loop alone, manual optimization",
}
BARE_ROW = "xfmr-train, bare"
DEFAULT_ROW = "xfmr-train, default callbacks and logging (+ progress bar)"


@dataclass(frozen=True)
class Row:
    name: str
    plain: str | None = None  # which model the plain loop trains; None: xfmr-train
    overrides: tuple[str, ...] = ()  # xfmr-train's, besides the shape's


def rows() -> list[Row]:
    """The plain loops, xfmr-train bare, then one row per part added back (cumulative)."""
    table = [Row(name, plain=model) for model, name in PLAIN_ROWS.items()]
    parts = list(PARTS)
    named = {entry for entries, _ in PARTS.values() for entry in entries}
    others = [e for e in default_callbacks() if e not in named and e != ALWAYS_OFF]
    for added in range(len(parts) + 1):
        off = [f"callbacks.{entry}=null" for part in parts[added:] for entry in PARTS[part][0]]
        off += [override for part in parts[added:] for override in PARTS[part][1]]
        if added < len(parts):
            off += [*(f"callbacks.{entry}=null" for entry in others), *SUMMARY_OFF]
        name = BARE_ROW if added == 0 else f"+ {parts[added - 1]}"
        table.append(Row(DEFAULT_ROW if added == len(parts) else name, overrides=tuple(off)))
    return table


def default_callbacks() -> list[str]:
    """The entries of xfmr-train's default callbacks (conf/callbacks/default.yaml)."""
    from omegaconf import OmegaConf

    from xfmr.paths import config_dir

    return list(OmegaConf.load(config_dir() / "callbacks" / "default.yaml"))


# ---------------------------------------------------------------- running the rows


def main() -> None:
    args = arguments()
    if args.plain:
        return plain_loop(args)
    if not 1 <= args.warmup <= args.steps - 2:
        sys.exit(f"--warmup {args.warmup} --steps {args.steps}: need 1 <= warmup <= steps - 2")
    args.out.mkdir(parents=True, exist_ok=True)
    args.load_before = os.getloadavg()[0]
    table = rows()
    if args.quick:  # the comparison that matters, for a check that the script runs
        table = [r for r in table if r.name in (PLAIN_ROWS["nanogpt"], PLAIN_ROWS["lightning"],
                                                DEFAULT_ROW)]  # fmt: skip
    measured: dict[str, list[dict[str, Any]]] = {row.name: [] for row in table}
    for round_ in range(1, args.rounds + 1):
        for row in table:
            record = run_row(row, args, args.out / f"round-{round_}")
            measured[row.name].append(record)
            mean, median = step_ms(record["times"], args.warmup)
            print(f"round {round_}/{args.rounds} {row.name}: mean {mean:.2f} ms/step, "
                  f"median {median:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    print_header(args, measured)
    print_table(measured, args.warmup)
    if args.profile:
        default = next(row for row in table if row.name == DEFAULT_ROW)
        unprofiled = statistics.median(
            step_ms(r["times"], args.warmup)[0] for r in measured[DEFAULT_ROW]
        )
        profile_row(default, args, unprofiled)


def arguments() -> argparse.Namespace:
    parser = script_parser(__doc__)
    add_nanogpt(parser)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/step_overhead"))
    parser.add_argument("--steps", type=int, default=300, help="training steps of every run")
    parser.add_argument("--warmup", type=int, default=20, help="steps left out of the timing")
    parser.add_argument("--rounds", type=int, default=3, help="every row once per round")
    parser.add_argument("--tty", action="store_true", help="xfmr-train writes to a terminal")
    parser.add_argument("--profile", action="store_true", help="cProfile the default row")
    parser.add_argument(
        "--quick", action="store_true", help="the plain loop, Lightning alone and the default row"
    )
    parser.add_argument("--plain", choices=PLAIN_ROWS, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.nanogpt, args.data, args.out = (p.resolve() for p in (args.nanogpt, args.data, args.out))
    return args


def run_row(
    row: Row, args: argparse.Namespace, round_dir: Path, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Runs one row in a process of its own; returns what it recorded (step end times, ...)."""
    slug = "-".join("".join(c if c.isalnum() else " " for c in row.name).split()).lower()
    run_dir, record, log = round_dir / slug, round_dir / f"{slug}.json", round_dir / f"{slug}.log"
    shutil.rmtree(run_dir, ignore_errors=True)
    record.unlink(missing_ok=True)
    round_dir.mkdir(parents=True, exist_ok=True)
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env = child_env(args.out / "cache", callbacks=not row.plain, **one_thread)
    if row.plain:
        command = [sys.executable, __file__, f"--plain={row.plain}", f"--record={record}",
                   f"--nanogpt={args.nanogpt}", f"--data={args.data}", f"--steps={args.steps}"]  # fmt: skip
    else:
        command = [*xfmr_command(args, run_dir, record), *row.overrides, *extra]
    returncode = run_child(command, env, log, cwd=round_dir, tty=args.tty and not row.plain)
    if returncode != 0 or not record.is_file():
        tail = log.read_text(errors="replace")[-3000:]
        sys.exit(f"{row.name} failed (exit {returncode}); {log}:\n{tail}")
    return json.loads(record.read_text())


def xfmr_command(args: argparse.Namespace, run_dir: Path, record: Path) -> list[str]:
    return train_command(
        *shakespeare_run(args.data, args.steps, SHAPE),
        f"schedule.warmup_steps={lr_warmup_steps(args.steps)}",
        "trainer.limit_val_batches=1",
        "throughput.peak_tflops=1",
        f"callbacks.{ALWAYS_OFF}=null",
        f"hydra.run.dir={run_dir}",
        "+callbacks.step_times._target_=overhead.step_times.StepTimes",
        f"+callbacks.step_times.path={record}",
        f"+callbacks.step_times.nanogpt={args.nanogpt}",
        f"+callbacks.step_times.data={args.data}",
    )


def run_child(command: list[str], env: dict[str, str], log: Path, *, cwd: Path, tty: bool) -> int:
    """Runs `command` with its output to `log`, or to a pseudo-terminal copied into `log`."""
    if not tty:
        with open(log, "wb") as out:
            return subprocess.run(command, env=env, cwd=cwd, stdout=out, stderr=out).returncode
    import fcntl
    import pty
    import struct
    import termios

    terminal, child_end = pty.openpty()
    fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**env, "TERM": env.get("TERM", "xterm-256color"), "COLUMNS": "120"}
    child = subprocess.Popen(command, env=env, cwd=cwd, stdout=child_end, stderr=child_end)
    os.close(child_end)
    with open(log, "wb") as out:
        while True:
            try:
                chunk = os.read(terminal, 1 << 16)
            except OSError:  # EIO: the child's end is closed
                break
            if not chunk:
                break
            out.write(chunk)
    os.close(terminal)
    return child.wait()


# ---------------------------------------------------------------- --profile


def profile_row(row: Row, args: argparse.Namespace, unprofiled_ms: float) -> None:
    """Runs `row` once more under cProfile (the timed steps) and prints where its time goes."""
    stats_file = args.out / "profile" / "steps.pstats"
    stats_file.parent.mkdir(parents=True, exist_ok=True)
    extra = (f"+callbacks.step_times.profile={stats_file}",
             f"+callbacks.step_times.profile_from={args.warmup}")  # fmt: skip
    record = run_row(row, args, args.out / "profile", extra)
    print_profile(row.name, stats_file, record, unprofiled_ms)


if __name__ == "__main__":
    main()
