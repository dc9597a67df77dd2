"""Training throughput of a GPT through xfmr-train beside nanoGPT's own train.py, same shape.

    python benchmarks/gpt_throughput.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --steps 60

Default shape: d_model 512, 8 layers, 8 heads, block 256, batch 8, no bias, no dropout, on
tiny Shakespeare's characters. nanoGPT is copied to a temporary directory, its shakespeare_char
data prepared there from --data (as its README says, offline), and its train.py run with
overrides on the command line. xfmr runs `xfmr-train experiment=nanogpt_shakespeare_char` with
the same shape and schedule, in fp32 and bf16-mixed (and compiled with --compile).

ms/step is the median over steps 6..N (the first five settle allocators and caches). MFU is
computed the same way for both: tokens/step x FLOPs per token (nanoGPT's 6N + 12*L*H*Q*T,
`xfmr.training.throughput`) / (ms/step) / the peak matmul FLOP/s of this machine in the run's
precision (measured once and cached, or --peak-tflops-fp32/--peak-tflops-bf16). nanoGPT's
train.py autocasts only on CUDA (`ctx = nullcontext()` on CPU): on a CPU it runs fp32 whatever
its --dtype, so it has no bf16 row here. Loss is the mean training loss of the last 10 steps.

--profile runs a few bf16-mixed steps of the same GPT through xfmr's training under
torch.profiler (`xfmr.training.profiling.ProfileSteps`) and prints where the time goes
(attention, matmuls, norms, softmax / loss, optimizer, copies, ...) and the top operators.
"""

from __future__ import annotations

import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from common import nanogpt
from common.cli import add_nanogpt, add_shakespeare, script_parser
from common.nanogpt import SETTLE_STEPS
from common.xfmr_runs import (
    QUIET,
    Shape,
    flops_per_token,
    logged_steps,
    shakespeare_run,
    train_config,
    xfmr_train,
)
from xfmr.training.run_summary import TRAIN_TOKENS_PER_S
from xfmr.training.throughput import BF16_MATMUL_FLAGS, cpu_bf16_flags, cpu_model

LOSS_STEPS = 10  # the loss column: mean training loss of the last steps
LR = 1e-3  # both frameworks' peak learning rate, down to a tenth over the run
WARMUP_STEPS = 10  # the schedule's warm-up, at most a fifth of the run


@dataclass
class Row:
    run: str
    precision: str
    step_ms: list[float]  # steps 6..N
    losses: list[float]  # every step's training loss

    @property
    def ms_per_step(self) -> float:
        return statistics.median(self.step_ms)

    @property
    def loss(self) -> float:
        return statistics.fmean(self.losses[-LOSS_STEPS:])


def xfmr_overrides(shape: Shape, data: Path, steps: int, warmup: int) -> list[str]:
    return [
        *shakespeare_run(data, steps, shape),
        f"optim.lr={LR}",
        f"schedule.warmup_steps={warmup}",
        "trainer.limit_val_batches=2",
        "trainer.log_every_n_steps=1",
        "trainer.enable_model_summary=false",
        "callbacks.model_checkpoint=null",
        "logger=csv",
        *QUIET,
    ]


def run_xfmr(
    shape: Shape, data: Path, out: Path, steps: int, warmup: int, precision: str, *, compile: bool
) -> Row:
    name = f"xfmr-{precision}{'-compiled' if compile else ''}"
    overrides = [
        *xfmr_overrides(shape, data, steps, warmup),
        f"trainer.precision={precision}",
        f"compile={str(compile).lower()}",
    ]
    finished = xfmr_train(overrides, out / name, out / "cache")
    logged = logged_steps(finished.run_dir)
    step_ms = [
        shape.tokens_per_step / values[TRAIN_TOKENS_PER_S] * 1000.0
        for index, values in enumerate(logged, start=1)
        if TRAIN_TOKENS_PER_S in values and index > SETTLE_STEPS
    ]
    losses = [values["train/loss"] for values in logged if "train/loss" in values]
    label = "compiled" if compile else "eager"
    return Row(f"xfmr-train ({label})", precision, step_ms, losses)


def nanogpt_args(
    shape: Shape, steps: int, warmup: int, out_dir: Path, *, seed_eval: int
) -> list[str]:
    """train.py's command line for `shape` on CPU, fp32, evaluating every `seed_eval` steps."""
    return [
        nanogpt.CONFIG,
        "--device=cpu",
        "--compile=False",
        "--dtype=float32",
        *nanogpt.shape_args(shape),
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--learning_rate={LR}",
        f"--min_lr={LR / 10}",
        f"--warmup_iters={warmup}",
        f"--eval_interval={seed_eval}",
        "--eval_iters=1",
        "--log_interval=1",
        "--bias=False",
        "--dropout=0.0",
        f"--out_dir={out_dir}",
    ]


def run_nanogpt(copy: Path, shape: Shape, steps: int, warmup: int) -> Row:
    # max_iters=N-1: train.py runs iterations 0..max_iters, N steps in all.
    args = nanogpt_args(shape, steps - 1, warmup, copy / "out-throughput", seed_eval=100 * steps)
    iterations = nanogpt.train(copy, args)
    step_ms = nanogpt.timed_ms(iterations)
    return Row("nanoGPT train.py", "32-true", step_ms, [it.loss for it in iterations])


def peak_flops(precision: str, out: Path, given_tflops: float | None) -> float:
    from xfmr.training.throughput import measured_peak_flops, precision_dtype

    if given_tflops is not None:
        return given_tflops * 1e12
    dtype = precision_dtype(precision)
    return measured_peak_flops(torch.device("cpu"), dtype, cache_dir=out / "cache")


def print_table(rows: list[Row], shape: Shape, fpt: float, peaks: dict[str, float]) -> None:
    reference = next((r for r in rows if r.run.startswith("nanoGPT")), rows[0])
    print(
        f"\nGPT d_model {shape.d_model}, {shape.n_layers} layers, {shape.n_heads} heads, block "
        f"{shape.block_size}, batch {shape.batch_size}: {fpt / 1e6:.1f} MFLOPs per token"
    )
    print(", ".join(f"peak {p}: {v / 1e9:.0f} GFLOP/s" for p, v in peaks.items()))
    print(
        "\n| run | precision | ms/step | tokens/s | loss (last 10) | MFU | ms/step vs "
        f"{reference.run} |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        tokens_per_s = shape.tokens_per_step / (row.ms_per_step / 1000.0)
        mfu = tokens_per_s * fpt / peaks[row.precision]
        print(
            f"| {row.run} | {row.precision} | {row.ms_per_step:.1f} | {tokens_per_s:.0f} | "
            f"{row.loss:.3f} | {mfu:.1%} | {row.ms_per_step / reference.ms_per_step:.2f}x |"
        )
    print(
        "| nanoGPT train.py | bf16 | - | - | - | - | not on CPU: train.py autocasts only on CUDA |"
    )


def profile_bf16(shape: Shape, data: Path, out: Path, steps: int, warmup: int) -> None:
    """A few bf16-mixed training steps of the same GPT under torch.profiler, through xfmr's
    own `run_training(cfg)` (Lightning, data loading, optimizer and all)."""
    from xfmr.training.run import run_training

    run_dir = out / "xfmr-profile"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [
        *xfmr_overrides(shape, data, SETTLE_STEPS + steps + 2, warmup),
        "trainer.precision=bf16-mixed",
        "logger=none",
        f"paths.root_dir={out}",
        f"paths.output_dir={run_dir}",
        f"paths.cache_dir={out / 'cache'}",
        "+callbacks.profile._target_=xfmr.training.profiling.ProfileSteps",
        f"+callbacks.profile.skip={SETTLE_STEPS}",
        f"+callbacks.profile.steps={steps}",
    ]
    run_training(train_config(overrides))


def main() -> None:
    parser = script_parser(__doc__)
    add_nanogpt(parser, required=False)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/gpt_throughput"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="also xfmr with compile=true")
    parser.add_argument("--profile", action="store_true", help="profile bf16-mixed steps")
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--peak-tflops-fp32", type=float)
    parser.add_argument("--peak-tflops-bf16", type=float)
    args = parser.parse_args()
    if args.steps <= SETTLE_STEPS + 1:
        sys.exit(f"--steps {args.steps}: give more than {SETTLE_STEPS + 1} (steps 6..N are timed)")
    shape = Shape(args.d_model, args.layers, args.heads, args.block, args.batch)
    warmup = min(WARMUP_STEPS, args.steps // 5)
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()

    if args.profile:
        profile_bf16(shape, data, args.out.resolve(), args.profile_steps, warmup)
        return
    rows = []
    if args.nanogpt is not None:
        with nanogpt.temporary_copy(args.nanogpt, data) as copy:
            rows.append(run_nanogpt(copy, shape, args.steps, warmup))
    for precision in ("32-true", "bf16-mixed"):
        for compile in (False, True) if args.compile else (False,):
            out = args.out.resolve()
            rows.append(run_xfmr(shape, data, out, args.steps, warmup, precision, compile=compile))
    peaks = {
        "32-true": peak_flops("32-true", args.out, args.peak_tflops_fp32),
        "bf16-mixed": peak_flops("bf16-mixed", args.out, args.peak_tflops_bf16),
    }
    vocab_size = len(set(data.read_text(encoding="utf-8")))
    print(cpu_bf16_note())
    print_table(rows, shape, flops_per_token(shape, vocab_size), peaks)


def cpu_bf16_note() -> str:
    """Whether this CPU multiplies bf16 in hardware: without it torch emulates bf16 matmuls, far
    below fp32, and the bf16 rows measure the emulation."""
    found = cpu_bf16_flags()
    if found is None:
        return "CPU flags: unknown (no /proc/cpuinfo)"
    if found:
        return f"{cpu_model()}: bf16 matmul in hardware ({', '.join(found)})"
    return (
        f"{cpu_model()}: no {' or '.join(BF16_MATMUL_FLAGS)}, so bf16 matmuls are emulated "
        "(the bf16 rows and peak measure the emulation, not bf16 hardware)"
    )


if __name__ == "__main__":
    main()
