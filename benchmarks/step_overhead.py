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
   Rows 1 and 2 differ in the model only, rows 2 and 3 in the loop only.
3. xfmr-train, bare: `experiment=nanogpt_shakespeare_char` at the shape with every optional part
   off: every entry of xfmr's conf/callbacks/default.yaml null (read from the installed config
   tree), no logger, no checkpoint callback or progress bar of Lightning's own, no model
   summary. What xfmr always adds (its run summary, the signal handling, the non-finite guard)
   stays.
4. the parts added back cumulatively, one per row: csv logging, the checkpoint callbacks (best
   and periodic: the periodic one saves nothing by default but runs its checks every step), the
   lr monitor, and last the progress bar with the rest of the defaults (the model summary and
   any other entry of that file, which act before training): the default config for callbacks
   and logging. Below the table, each row's callbacks as Lightning ran them.

Every xfmr-train row: the shape, `trainer.max_steps` = --steps, one validation of one batch after
the last step (`trainer.val_check_interval` = --steps; outside the timing), no sanity check,
`throughput.peak_tflops=1` (no peak measured), no closing text sample, and the warm-up of the
schedule the plain loops use (`schedule.warmup_steps`).

Timing, the same for every row: `time.perf_counter()` at the end of every step, in the plain loops
after the step, in xfmr-train in `on_train_batch_end` of this script's callback `StepTimes`
(added with `+callbacks.step_times`, benchmarks/ on PYTHONPATH). On a CPU torch's work is
synchronous, so the interval between two ends is a step's whole cost: batch, forward, backward,
clipping, update, schedule, logging, callbacks. Steps after --warmup are timed: `mean` is their
total time over their number (what the run takes, the logging steps every
`trainer.log_every_n_steps` = 10 included), `median` the typical step. The ratio compares
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
import cProfile
import functools
import inspect
import json
import math
import os
import platform
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from common.nanogpt import model_classes
from common.xfmr_runs import Shape, child_env, train_command

SEED = 1337
VAL_FRACTION = 0.1  # the text datamodule's default: the plain loops train on the same head
LOG_INTERVAL = 10  # the plain loops read the loss this often; xfmr's trainer.log_every_n_steps
GOAL = 1.10  # xfmr-train's default row over the plain loop, mean time per step
# The optimizer and schedule of experiment=nanogpt_shakespeare_char (conf/optim/adamw.yaml and
# the experiment's overrides), which xfmr-train reads from its config.
LR, BETAS, WEIGHT_DECAY, MIN_LR_RATIO, GRAD_CLIP = 1e-3, (0.9, 0.99), 0.1, 0.1, 1.0


SHAPE = Shape(d_model=48, n_layers=6, n_heads=6, block_size=32, batch_size=4)

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


# ---------------------------------------------------------------- the parent: rows and table


def main() -> None:
    args = arguments()
    if args.plain:
        return plain_loop(args)
    if not (args.nanogpt / "model.py").is_file():
        sys.exit(f"--nanogpt {args.nanogpt}: no model.py there (nanoGPT's directory)")
    if not args.data.is_file():
        sys.exit(f"--data {args.data}: no such file (tiny Shakespeare's input.txt)")
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
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nanogpt", type=Path, required=True, help="nanoGPT's directory")
    parser.add_argument("--data", type=Path, required=True, help="tiny Shakespeare's input.txt")
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


def lr_warmup_steps(steps: int) -> int:
    """The schedule's warm-up, 5% of the run as in the experiment, the same for every row."""
    return max(1, round(0.05 * steps))


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
        "experiment=nanogpt_shakespeare_char",
        f"data.path={args.data}",
        *SHAPE.overrides(),
        f"schedule.warmup_steps={lr_warmup_steps(args.steps)}",
        f"trainer.max_steps={args.steps}",
        f"trainer.val_check_interval={args.steps}",
        "trainer.limit_val_batches=1",
        "trainer.num_sanity_val_steps=0",
        "throughput.peak_tflops=1",
        f"callbacks.{ALWAYS_OFF}=null",
        f"hydra.run.dir={run_dir}",
        "+callbacks.step_times._target_=step_overhead.StepTimes",
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
    print(f"    {shlex.join(['python', *sys.argv])}\n")
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


# ---------------------------------------------------------------- the plain loops


def plain_loop(args: argparse.Namespace) -> None:
    """One plain-loop row in this process: trains `args.steps` steps, records their end times."""
    import torch

    torch.set_num_threads(1)
    if args.plain == "lightning":
        return lightning_alone(args)
    loop = PlainLoop(args.plain, args.nanogpt, args.data, steps=args.steps)
    # xfmr's model is paired with nanoGPT's as xfmr-train is: the two models side by side.
    beside = (
        PairedPlainLoop(args.nanogpt, args.data, steps=args.steps) if args.plain == "xfmr" else None
    )
    times, paired, paired_total = [], [], 0.0
    for _ in range(args.steps):
        loop.step()
        times.append(time.perf_counter() - paired_total)
        if beside is not None:
            paired.append(beside.step())
            paired_total += paired[-1]
    record = {"times": times, "paired": paired, "threads": torch.get_num_threads(),
              "loss": loop.loss.item()}  # fmt: skip
    args.record.write_text(json.dumps(record))


def lightning_alone(args: argparse.Namespace) -> None:
    """Lightning's Trainer around nanoGPT's model with nothing of xfmr's and everything
    optional off (no logger, callbacks, checkpointing, progress bar or summary): the same
    batches, optimizer, schedule and clipping as the plain loop, stepped beside it as the
    xfmr-train rows are. What Lightning's own loop costs at this shape."""
    import lightning as L
    import torch

    StepTimes = _step_times_class()
    loop = PlainLoop("nanogpt", args.nanogpt, args.data, steps=args.steps)

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            generator = torch.Generator().manual_seed(SEED + 1)
            while True:
                yield random_batch(loop.train, generator)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = loop.model

        def training_step(self, batch, batch_idx):
            return loop.loss_of(*batch)

        def configure_optimizers(self):
            optimizer = adamw(self.model)
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer,
                lambda step: nanogpt_lr(step, warmup=loop.warmup, decay_steps=args.steps) / LR,
            )
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule,
                                                             "interval": "step"}}  # fmt: skip

    timer = StepTimes(str(args.record), nanogpt=str(args.nanogpt), data=str(args.data))
    trainer = L.Trainer(accelerator="cpu", max_steps=args.steps, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, gradient_clip_val=GRAD_CLIP,
                        limit_val_batches=0, callbacks=[timer])  # fmt: skip
    trainer.fit(Module(), torch.utils.data.DataLoader(Batches(), batch_size=None))


class PlainLoop:
    """nanoGPT's train.py loop at SHAPE around `model` ("nanogpt" or "xfmr"), a step at a time:
    lr set, batch drawn (from a generator of its own), forward, backward, clipping, update,
    zero_grad, and the loss read every LOG_INTERVAL steps."""

    def __init__(self, model: str, nanogpt: Path, data: Path, *, steps: int) -> None:
        import torch

        with torch.random.fork_rng():  # a paired loop leaves the run's generators alone
            torch.manual_seed(SEED)
            text = data.read_text(encoding="utf-8")
            vocab = {c: i for i, c in enumerate(sorted(set(text)))}
            tokens = torch.tensor([vocab[c] for c in text], dtype=torch.long)
            self.train = tokens[: int(len(tokens) * (1 - VAL_FRACTION))]
            # One more id than characters: xfmr's char tokenizer adds <unk>, so both match.
            self.model, self.loss_of = plain_model(model, nanogpt, vocab_size=len(vocab) + 1)
        self.model.train()
        self.optimizer = adamw(self.model)
        self.generator = torch.Generator().manual_seed(SEED)
        self.steps, self.warmup, self.done = steps, lr_warmup_steps(steps), 0
        self.loss = None

    def step(self) -> None:
        import torch

        for group in self.optimizer.param_groups:
            group["lr"] = nanogpt_lr(self.done, warmup=self.warmup, decay_steps=self.steps)
        x, y = random_batch(self.train, self.generator)
        self.loss = self.loss_of(x, y)
        self.loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.done % LOG_INTERVAL == 0:
            self.loss.item()
        self.done += 1


class PairedPlainLoop(PlainLoop):
    """The plain loop over nanoGPT's model, a step after each of xfmr's in the same process."""

    def __init__(self, nanogpt: Path, data: Path, *, steps: int) -> None:
        super().__init__("nanogpt", nanogpt, data, steps=steps)

    def step(self) -> float:  # type: ignore[override]
        """One step; its seconds."""
        started = time.perf_counter()
        super().step()
        return time.perf_counter() - started


def plain_model(name: str, nanogpt: Path, *, vocab_size: int) -> tuple[Any, Callable]:
    """(model, loss of (x, y)) for nanoGPT's GPT or xfmr's decoder at SHAPE."""
    if name == "nanogpt":
        GPT, GPTConfig = model_classes(nanogpt)
        config = GPTConfig(block_size=SHAPE.block_size, vocab_size=vocab_size,
                           n_layer=SHAPE.n_layers, n_head=SHAPE.n_heads, n_embd=SHAPE.d_model,
                           dropout=0.0, bias=False)  # fmt: skip
        model = GPT(config)
        return model, lambda x, y: model(x, y)[1]
    from xfmr.nn import ModelConfig
    from xfmr.objectives import CausalLMObjective

    config = ModelConfig(vocab_size=vocab_size, n_layers=SHAPE.n_layers, n_heads=SHAPE.n_heads,
                         d_model=SHAPE.d_model, bias=False, dropout=0.0, tie_embeddings=True,
                         pos={"name": "learned", "max_positions": SHAPE.block_size})  # fmt: skip
    objective = CausalLMObjective()
    model = objective.build_model(config)

    def loss(x: Any, y: Any) -> Any:  # the objective's sum over the block, as a mean: all count
        return objective.forward(model, {"input_ids": x, "labels": y})[0]["tokens"] / y.numel()

    return model, loss


def adamw(model: Any) -> Any:
    """Fused AdamW, weight decay on matrices and embeddings only (tied weights listed once)."""
    import torch

    params = list(model.parameters())  # unique: nn.Module yields a shared tensor once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=True)


def nanogpt_lr(step: int, *, warmup: int, decay_steps: int) -> float:
    """nanoGPT's get_lr: linear warm-up, then cosine decay to MIN_LR_RATIO * LR."""
    if step < warmup:
        return LR * (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / (decay_steps - warmup))
    return LR * (MIN_LR_RATIO + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1 - MIN_LR_RATIO))


def random_batch(tokens: Any, generator: Any) -> tuple[Any, Any]:
    """nanoGPT's get_batch: BATCH random offsets, inputs and targets shifted by one, stacked."""
    import torch

    block = SHAPE.block_size
    starts = torch.randint(len(tokens) - block, (SHAPE.batch_size,), generator=generator)
    x = torch.stack([tokens[i : i + block] for i in starts])  # (B, T)
    y = torch.stack([tokens[i + 1 : i + 1 + block] for i in starts])  # (B, T)
    return x, y


# ---------------------------------------------------------------- xfmr-train's side


@functools.cache
def _step_times_class() -> type:
    import lightning as L
    import torch

    class StepTimes(L.Callback):
        """Records `time.perf_counter()` at the end of every training step and writes the list,
        the torch threads and the callbacks to `path` when training ends. With `profile`, runs
        cProfile from the end of step `profile_from` to the end of the last step and writes
        its stats there, and the code of every callback's hooks beside them.

        With `nanogpt` and `data`, each step is followed by one step of the plain loop over
        nanoGPT's model (`PairedPlainLoop`), in this process and timed apart: its time is
        taken out of xfmr's interval and recorded, so the two are measured at the same
        moments on the same core."""

        def __init__(
            self,
            path: str,
            profile: str | None = None,
            profile_from: int = 1,
            nanogpt: str | None = None,
            data: str | None = None,
        ) -> None:
            self.path, self.profile, self.profile_from = Path(path), profile, profile_from
            self.times: list[float] = []
            self.paired: list[float] = []  # the plain step's seconds after each xfmr step
            self.paired_total = 0.0
            self.plain = (nanogpt, data) if nanogpt and data and not profile else None
            self.profiler: cProfile.Profile | None = None

        def on_train_start(self, trainer, pl_module) -> None:
            if self.plain is not None:
                self.plain = PairedPlainLoop(Path(self.plain[0]), Path(self.plain[1]),
                                             steps=trainer.max_steps)  # fmt: skip

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            # A clock that stops while the paired plain steps run: its intervals are xfmr's.
            self.times.append(time.perf_counter() - self.paired_total)
            if isinstance(self.plain, PairedPlainLoop):
                self.paired.append(self.plain.step())
                self.paired_total += self.paired[-1]
            if self.profile and len(self.times) == self.profile_from:
                self.profiler = cProfile.Profile()
                self.profiler.enable()
            elif self.profiler is not None and len(self.times) == trainer.max_steps:
                self.profiler.disable()
                self.profiler.dump_stats(self.profile)

        def on_train_end(self, trainer, pl_module) -> None:
            record = {
                "times": self.times,
                "paired": self.paired,
                "threads": torch.get_num_threads(),
                "callbacks": [type(c).__name__ for c in trainer.callbacks],
                "data_workers": getattr(trainer.train_dataloader, "num_workers", None),
            }
            if self.profile:
                record["hooks"] = {type(c).__name__: hook_code(c) for c in trainer.callbacks}
                record["profiled_steps"] = len(self.times) - self.profile_from
            self.path.write_text(json.dumps(record))

    def hook_code(callback: L.Callback) -> list[tuple[str, int, str]]:
        """Where each hook the callback's class overrides is defined: cProfile's keys."""
        found = []
        for name in dir(L.Callback):
            if not name.startswith("on_"):
                continue
            method = getattr(type(callback), name)
            if method is getattr(L.Callback, name):
                continue
            code = inspect.unwrap(method).__code__
            found.append((code.co_filename, code.co_firstlineno, code.co_name))
        return found

    return StepTimes


def __getattr__(name: str) -> Any:
    # The callback is built on first use, so that the plain loops never import Lightning.
    if name == "StepTimes":
        return _step_times_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------- --profile


def profile_row(row: Row, args: argparse.Namespace, unprofiled_ms: float) -> None:
    """Runs `row` once more under cProfile (the timed steps) and prints where its time goes."""
    stats_file = args.out / "profile" / "steps.pstats"
    stats_file.parent.mkdir(parents=True, exist_ok=True)
    extra = (f"+callbacks.step_times.profile={stats_file}",
             f"+callbacks.step_times.profile_from={args.warmup}")  # fmt: skip
    record = run_row(row, args, args.out / "profile", extra)
    stats = pstats.Stats(str(stats_file)).stats
    steps = record["profiled_steps"]
    total = sum(entry[2] for entry in stats.values())
    print(f"\n## cProfile: {row.name}\n\n{steps} steps, {1e6 * total / steps:.0f} µs/step "
          f"under cProfile ({1000 * unprofiled_ms:.0f} µs/step without, the table's mean)\n")  # fmt: skip
    print("Parts of a step, each with what it calls (they nest and do not add up):\n")
    print("| part | µs/step | share of the profiled step |\n|---|---:|---:|")
    for part, inside in step_parts(record["hooks"]):
        seconds = entered_time(stats, inside)
        print(f"| {part} | {1e6 * seconds / steps:.0f} | {seconds / total:.1%} |")
    print("\nSelf time by package (adds up to the profiled step):\n")
    print("| package | µs/step | share |\n|---|---:|---:|")
    by_package: dict[str, float] = {}
    for key, entry in stats.items():
        by_package[package(key)] = by_package.get(package(key), 0.0) + entry[2]
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1]):
        print(f"| {name} | {1e6 * seconds / steps:.0f} | {seconds / total:.1%} |")
    print_top_functions(stats, steps)


Key = tuple[str, int, str]


def entered_time(stats: dict[Key, tuple], inside) -> float:
    """Cumulative seconds in the functions `inside` selects, counted where they are called from
    a function it does not select (or from nothing cProfile saw), so nesting counts once."""
    seconds = 0.0
    for key, (_, _, _, cumulative, callers) in stats.items():
        if not inside(key):
            continue
        if not callers:
            seconds += cumulative
            continue
        seconds += sum(entry[3] for caller, entry in callers.items() if not inside(caller))
    return seconds


def _in(path: str, function: str | None = None):
    """Selects the functions (all, or those named `function`) of files whose path has `path`."""
    path = path.replace("/", os.sep)
    return lambda key: path in key[0] and (function is None or key[2] == function)


def step_parts(hooks: dict[str, list[list[Any]]]) -> list[tuple[str, Any]]:
    """The parts of a step --profile reports: (name, which cProfile keys belong to it)."""
    parts = [
        ("the whole step (Lightning's training_epoch_loop.advance)",
         _in("loops/training_epoch_loop.py", "advance")),
        ("batch (Lightning's fetcher, DataLoader, collate)", _in("lightning/pytorch/loops/fetchers")),
        ("torch.manual_seed (it captures the stack for lazy CUDA, MTIA and XPU seeding)",
         _in("torch/random.py", "manual_seed")),
        ("training_step (xfmr's module)", _in("xfmr/training/module.py", "training_step")),
        ("forward + loss (the objective's forward)", _in("xfmr/objectives/", "forward")),
        ("LightningModule.log", _in("lightning/pytorch/core/module.py", "log")),
        ("backward (Tensor.backward)", _in("torch/_tensor.py", "backward")),
        ("non-finite guard (xfmr.training.guards)", _in("xfmr/training/guards.py")),
        ("optimizer.step, Lightning's wrappers (clipping, hooks inside)",
         _in("lightning/pytorch/core/optimizer.py", "step")),
        ("gradient clipping (clip_grad_norm_)", _in("torch/nn/utils/clip_grad.py")),
        ("AdamW's fused kernel", lambda key: "_fused_adamw" in key[2]),
        ("zero_grad", _in("torch/optim/optimizer.py", "zero_grad")),
        ("lr schedule (LambdaLR.step)", _in("torch/optim/lr_scheduler.py", "step")),
        ("logger connector (results, logger writes)", _in("connectors/logger_connector/")),
        ("logger writes (the loggers' log_metrics)", _in("/loggers/", "log_metrics")),
    ]  # fmt: skip
    classes: dict[frozenset, list[str]] = {}  # classes that share their hooks' code share a row
    for name, code in hooks.items():
        if name != "StepTimes" and code:
            classes.setdefault(frozenset(map(tuple, code)), []).append(name)
    for code, names in classes.items():
        parts.append((f"callback {', '.join(names)}", lambda key, code=code: key in code))
    own = frozenset(map(tuple, hooks.get("StepTimes", [])))
    parts.append(("callback StepTimes (this benchmark's timer)", lambda key: key in own))
    return parts


def package(key: Key) -> str:
    path = key[0].replace(os.sep, "/")
    if path == "~":
        return "C functions (torch's ops and autograd; Python's builtins)"
    for marker, name in (("/lightning/", "lightning"), ("/lightning_utilities/", "lightning"),
                         ("/torchmetrics/", "torchmetrics"), ("/torch/", "torch (Python)"),
                         ("/xfmr/", "xfmr"), ("/rich/", "rich"), ("step_overhead", "StepTimes")):  # fmt: skip
        if marker in path:
            return name
    return "Python's library and others"


def print_top_functions(stats: dict[Key, tuple], steps: int, count: int = 15) -> None:
    print(f"\nThe {count} functions with the most self time:\n")
    print("| function | µs/step self | µs/step with callees | calls/step |\n|---|---:|---:|---:|")
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:count]
    for (path, line, function), (_, calls, self_s, cumulative, _) in top:
        where = function if path == "~" else f"{function} ({shorten(path)}:{line})"
        print(f"| {where} | {1e6 * self_s / steps:.0f} | {1e6 * cumulative / steps:.0f} | "
              f"{calls / steps:.1f} |")  # fmt: skip


def shorten(path: str) -> str:
    parts = Path(path).parts
    for anchor in ("site-packages", "src"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return Path(path).name


if __name__ == "__main__":
    main()
