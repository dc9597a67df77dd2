"""xfmr-train beside nanoGPT's own train.py on one GPU: nanoGPT's GPU Shakespeare run, eager and
compiled, and a GPT-2-small-shaped model in bf16 with a profile of its step.

    python benchmarks/gpu_shakespeare.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --steps 5000
    python benchmarks/gpu_shakespeare.py --nanogpt ... --data ... --device cpu --tiny --steps 8

1. nanoGPT's config/train_shakespeare_char.py (6 layers, 6 heads, d 384, block 256, batch 64,
   dropout 0.2, lr 1e-3 -> 1e-4, warm-up 100), --steps of it (default its 5000) for both.
   nanoGPT runs from a temporary copy (data prepared there from --data, offline; nothing in the
   copy edited), in its default dtype (bf16 where the GPU has it, else fp16); xfmr-train with
   trainer.precision=auto (the same choice). Both with and without compile. Validation loss:
   each run's last weights over every block of xfmr's validation split (the last 10% of the
   text), float32, nanoGPT's checkpoint through its own model class.
2. A GPT-2-small-shaped model (12 layers, 12 heads, d 768, block 1024, --gpt2-batch) through
   xfmr-train in bf16-mixed on the same characters (vocabulary 65, not GPT-2's 50257), and a
   few of its steps under torch.profiler (`xfmr.training.profiling.ProfileSteps`): where the
   GPU's kernel time goes, by what launched each kernel, and the top operators.

ms/step: the median of steps 6..N, validation and evaluation steps left out (xfmr's
results.json; nanoGPT's printed times). MFU: tokens/step x FLOPs per token (nanoGPT's
6N + 12*L*H*Q*T) / (ms/step) / the device's peak, measured here (2048x2048 bf16 matmuls on the
GPU; on a CPU, float32 matmuls, the precision auto picks there). --device cpu runs the same
path on a CPU, where nanoGPT trains in float32; --tiny shrinks both models for a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_throughput import (  # noqa: E402
    NANOGPT_LINE,
    SETTLE_STEPS,
    Shape,
    flops_per_token,
    prepare_nanogpt,  # noqa: E402
)
from nanogpt_loss import nanogpt_loss, validation_blocks  # noqa: E402

from xfmr.runs.evaluation import evaluate_loss  # noqa: E402
from xfmr.training.throughput import measured_peak_flops  # noqa: E402

SHAKESPEARE = Shape(d_model=384, n_layers=6, n_heads=6, block_size=256, batch_size=64)
GPT2_SMALL = Shape(d_model=768, n_layers=12, n_heads=12, block_size=1024, batch_size=8)
TINY_SHAKESPEARE = Shape(d_model=64, n_layers=2, n_heads=2, block_size=32, batch_size=4)
TINY_GPT2 = Shape(d_model=64, n_layers=2, n_heads=2, block_size=64, batch_size=2)
DROPOUT = 0.2
WARMUP = 100  # nanoGPT's warmup_iters


@dataclass
class Row:
    run: str
    compiled: bool
    precision: str
    ms_per_step: float
    val_loss: float | None = None
    checkpoint: Path | None = None  # nanoGPT's, scored after training


def xfmr_command(shape: Shape, data: Path, steps: int, device: str, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "xfmr.cli.train",
        "experiment=nanogpt_shakespeare_char",
        f"data.path={data}",
        f"model.d_model={shape.d_model}",
        f"model.n_layers={shape.n_layers}",
        f"model.n_heads={shape.n_heads}",
        f"data.block_size={shape.block_size}",
        f"data.batch_size={shape.batch_size}",
        f"optim.lr={shape.lr}",
        f"schedule.warmup_steps={min(WARMUP, max(1, steps // 5))}",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        f"trainer.accelerator={'gpu' if device == 'cuda' else 'cpu'}",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_model_summary=false",
        "callbacks.progress_bar=null",
        "callbacks.text_sample=null",
        "logger=none",
        "print_config=false",
        "throughput.peak_tflops=1",  # MFU is computed here, against one measured peak
        f"hydra.run.dir={run_dir}",
    ]


def run_xfmr(name, shape, data, out, steps, device, *, compile: bool, extra=()) -> tuple[Row, Path]:
    run_dir = out / f"xfmr-{name}{'-compiled' if compile else ''}"
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [*xfmr_command(shape, data, steps, device, run_dir), f"compile={compile}".lower()]
    env = {**os.environ, "XFMR_CACHE_DIR": str(out / "cache")}
    subprocess.run([*command, *extra], check=True, stdout=subprocess.DEVNULL, env=env)
    results = json.loads((run_dir / "results.json").read_text())
    row = Row("xfmr-train", compile, results["precision"], results["ms_per_step"])
    return row, run_dir


def run_nanogpt(copy: Path, shape: Shape, steps: int, device: str, *, compile: bool) -> Row:
    """train.py as nanoGPT's GPU Shakespeare config runs it, for `steps` steps; its checkpoint
    holds the weights after exactly `steps` (saved at the evaluation of iteration `steps`)."""
    out_dir = copy / f"out-{'compiled' if compile else 'eager'}"
    args = [
        "config/train_shakespeare_char.py",
        f"--device={device}",
        f"--compile={compile}",
        f"--n_layer={shape.n_layers}",
        f"--n_head={shape.n_heads}",
        f"--n_embd={shape.d_model}",
        f"--block_size={shape.block_size}",
        f"--batch_size={shape.batch_size}",
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--warmup_iters={min(WARMUP, max(1, steps // 5))}",
        f"--eval_interval={steps}",
        "--eval_iters=2",  # its own estimate is not used: both are scored on the same blocks
        "--log_interval=1",
        "--always_save_checkpoint=True",
        f"--out_dir={out_dir}",
    ]
    args += [] if device == "cuda" else ["--dtype=float32"]  # it autocasts on CUDA only
    result = subprocess.run(
        [sys.executable, "train.py", *args], cwd=copy, check=True, capture_output=True, text=True
    )
    step_ms = [
        float(m[3])
        for m in NANOGPT_LINE.finditer(result.stdout)
        if int(m[1]) >= SETTLE_STEPS and int(m[1]) % steps  # evaluation steps left out
    ]
    dtype = "float32" if device != "cuda" else _nanogpt_cuda_dtype()
    return Row(
        "nanoGPT train.py", compile, dtype, statistics.median(step_ms), None, out_dir / "ckpt.pt"
    )


def _nanogpt_cuda_dtype() -> str:
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def shakespeare_rows(args, copy: Path, data: Path, out: Path) -> list[Row]:
    shape = TINY_SHAKESPEARE if args.tiny else SHAKESPEARE
    rows = []
    for compile in (False, True) if args.compile else (False,):
        xfmr_row, run_dir = run_xfmr(
            "shakespeare",
            shape,
            data,
            out,
            args.steps,
            args.device,
            compile=compile,
            extra=[f"model.dropout={DROPOUT}", f"model.attn_dropout={DROPOUT}"],
        )
        nanogpt_row = run_nanogpt(copy, shape, args.steps, args.device, compile=compile)
        xfmr_run, loader = validation_blocks(run_dir, device=args.device)
        xfmr_row.val_loss = evaluate_loss(xfmr_run, loader)["loss"]
        nanogpt_row.val_loss = nanogpt_loss(
            copy, nanogpt_row.checkpoint, xfmr_run, loader, device=args.device
        )
        rows += [xfmr_row, nanogpt_row]
    return rows


def peak(device: str, out: Path, given_tflops: float | None) -> tuple[float, str]:
    """The device's peak matmul FLOP/s: bf16 on a GPU, float32 on a CPU (auto's precision)."""
    if given_tflops is not None:
        return given_tflops * 1e12, "given"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    flops = measured_peak_flops(torch.device(device), dtype, cache_dir=out / "cache")
    return flops, f"measured, {str(dtype).removeprefix('torch.')}"


def mfu(shape: Shape, ms: float, fpt: float, peak_flops: float) -> float:
    return shape.tokens_per_step / (ms / 1000.0) * fpt / peak_flops


def print_tables(args, rows, gpt2_row, vocab_size, peak_flops, peak_note) -> None:
    device = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    shape = TINY_SHAKESPEARE if args.tiny else SHAKESPEARE
    fpt = flops_per_token(shape, vocab_size)
    print(f"\n{device}; peak {peak_flops / 1e12:.2f} TFLOP/s ({peak_note}); {args.steps} steps")
    print(
        f"\nShakespeare char, {shape.n_layers} layers, {shape.n_heads} heads, d {shape.d_model}, "
        f"block {shape.block_size}, batch {shape.batch_size}\n"
    )
    print("| run | compile | precision | ms/step | MFU | val loss (every block) |")
    print("|---|---|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.run} | {'yes' if row.compiled else 'no'} | {row.precision} | "
            f"{row.ms_per_step:.1f} | {mfu(shape, row.ms_per_step, fpt, peak_flops):.1%} | "
            f"{row.val_loss:.4f} |"
        )
    if gpt2_row is None:
        return
    gpt2 = TINY_GPT2 if args.tiny else GPT2_SMALL
    fpt = flops_per_token(gpt2, vocab_size)
    print(
        f"\nGPT-2-small-shaped, {gpt2.n_layers} layers, d {gpt2.d_model}, block "
        f"{gpt2.block_size}, batch {gpt2.batch_size}, vocabulary {vocab_size}\n"
    )
    print("| run | precision | ms/step | MFU |\n|---|---|---:|---:|")
    print(
        f"| xfmr-train | {gpt2_row.precision} | {gpt2_row.ms_per_step:.1f} | "
        f"{mfu(gpt2, gpt2_row.ms_per_step, fpt, peak_flops):.1%} |"
    )


def gpt2_precision(device: str) -> str:
    """bf16-mixed on the GPU; on a CPU auto's float32, as a CPU without AMX or AVX512-BF16
    emulates bf16 matmuls some hundred times slower (the CPU path checks the script only)."""
    return "bf16-mixed" if device == "cuda" else "32-true"


def profile_gpt2(args, data: Path, out: Path) -> None:
    """A few steps of the GPT-2-shaped model under torch.profiler, in xfmr-train's own process
    (`xfmr.training.profiling.ProfileSteps`, which prints where the step goes once they are
    recorded), its tables printed here."""
    gpt2 = TINY_GPT2 if args.tiny else GPT2_SMALL
    steps = SETTLE_STEPS + args.profile_steps + 2
    run_dir = out / "xfmr-gpt2-profile"
    shutil.rmtree(run_dir, ignore_errors=True)
    precision = gpt2_precision(args.device)
    command = [
        *xfmr_command(gpt2, data, steps, args.device, run_dir),
        f"trainer.precision={precision}",
        "+callbacks.profile._target_=xfmr.training.profiling.ProfileSteps",
        f"+callbacks.profile.skip={SETTLE_STEPS}",
        f"+callbacks.profile.steps={args.profile_steps}",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(out / "cache")}
    result = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    print(f"\ntorch.profiler, GPT-2-small-shaped, {precision}: {printed_profile(result.stdout)}")


def printed_profile(stdout: str) -> str:
    """ProfileSteps' report in a run's output: its "N steps profiled" line and the tables after
    it, up to the first line that is neither a table row nor blank."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if " profiled: " in line), None)
    if start is None:
        raise RuntimeError(
            f"the profiled run printed no profile; its output ends:\n{stdout[-2000:]}"
        )
    end = start + 1
    while end < len(lines) and (lines[end].startswith("|") or not lines[end].strip()):
        end += 1
    return "\n".join(lines[start:end]).rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, required=True, help="nanoGPT's directory")
    parser.add_argument("--data", type=Path, required=True, help="tinyshakespeare input.txt")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_shakespeare"))
    parser.add_argument("--steps", type=int, default=5000, help="for every run (nanoGPT: 5000)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="2 layers, d 64: a quick check")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument("--gpt2-batch", type=int, default=GPT2_SMALL.batch_size)
    parser.add_argument("--gpt2-steps", type=int, default=30)
    parser.add_argument("--no-gpt2", dest="gpt2", action="store_false")
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument("--peak-tflops", type=float, help="instead of measuring the peak")
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"--data {args.data}: no such file (tinyshakespeare input.txt)")
    if not (args.nanogpt / "train.py").is_file():
        sys.exit(f"--nanogpt {args.nanogpt}: no train.py there (nanoGPT's directory)")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU here; --device cpu runs the same path on the CPU")
    if min(args.steps, args.gpt2_steps) <= SETTLE_STEPS + 1:
        sys.exit(f"--steps and --gpt2-steps: give more than {SETTLE_STEPS + 1} (6..N are timed)")
    GPT2_SMALL.batch_size = args.gpt2_batch
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    with tempfile.TemporaryDirectory(prefix="nanogpt-") as work:
        copy = prepare_nanogpt(args.nanogpt.resolve(), data, Path(work))
        rows = shakespeare_rows(args, copy, data, out)
    gpt2_row = None
    if args.gpt2:
        gpt2 = TINY_GPT2 if args.tiny else GPT2_SMALL
        gpt2_row, _ = run_xfmr(
            "gpt2", gpt2, data, out, args.gpt2_steps, args.device, compile=False,
            extra=[f"trainer.precision={gpt2_precision(args.device)}"],
        )  # fmt: skip
    vocab_size = len(set(data.read_text(encoding="utf-8")))
    print_tables(args, rows, gpt2_row, vocab_size, *peak(args.device, out, args.peak_tflops))
    if args.gpt2:
        profile_gpt2(args, data, out)


if __name__ == "__main__":
    main()
