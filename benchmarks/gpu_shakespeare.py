"""xfmr-train beside nanoGPT's own train.py on one GPU, in one run: nanoGPT's GPU Shakespeare
config and a GPT-2-small-shaped model, each eager, compiled and (xfmr) as CUDA graphs, MFU
against the GPU's datasheet peak, the goals met or not, and a profile of the GPT-2-shaped step.

    python benchmarks/gpu_shakespeare.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --steps 300 --gpt2-steps 30 \\
        --out-json outputs/bench/gpu_shakespeare.json
    python benchmarks/gpu_shakespeare.py --nanogpt ... --data ... --device cpu --tiny \\
        --steps 8 --gpt2-steps 8 --no-compile

1. nanoGPT's config/train_shakespeare_char.py (6 layers, 6 heads, d 384, block 256, batch 64,
   dropout 0.2, lr 1e-3 -> 1e-4, warm-up 100), --steps of it (default its 5000) for every run:
   xfmr-train with compile=false, true and reduce-overhead (CUDA graphs), nanoGPT's train.py
   with --compile=False and True. nanoGPT runs from a temporary copy (data prepared there from
   --data, offline; nothing in the copy edited) in its default dtype (bf16 where the GPU has
   it, else fp16); xfmr-train in the precision trainer.precision=auto picks, set explicitly.
   Validation loss: each run's last weights over every block of xfmr's validation split (the
   last 10% of the text), float32, nanoGPT's checkpoint through its own model class.
2. A GPT-2-small-shaped model (12 layers, 12 heads, d 768, block 1024, batch --gpt2-batch, no
   bias, no dropout; vocabulary 65, tiny Shakespeare's characters, not GPT-2's 50257), the same
   five runs for --gpt2-steps steps, nanoGPT with --bias=False --dropout=0.0 (with --loss-chunk
   N[,M..], xfmr's runs again with objective.loss_chunk=N for each N, rows
   "MODE+loss_chunk=N"); then a few xfmr steps (eager, or compiled with --profile-mode true)
   under torch.profiler (`xfmr.training.profiling.ProfileSteps`): where the GPU's kernel time
   goes, by what launched each kernel, and the top operators.

ms/step: xfmr's results.json, the median step over windows that end at its logging steps
(every `trainer.log_every_n_steps`, 10, where it waits for the device; validation left out),
the first window (steps 2-10) holding a compiled run's warm-up and CUDA graph recording: at
--gpt2-steps 30 it is one window of three, so the median is another. nanoGPT's printed
per-iteration times (its --log_interval=1 reads the loss every step, as it is run), median of
iterations 5..N without evaluation iterations. MFU, the same for every row: tokens
per step x FLOPs per token (nanoGPT's 6N + 12*L*H*Q*T) / (ms/step) / one device's dense peak in
the training precision, `xfmr.training.throughput.resolve_peak`: a GPU's datasheet figure
(Lightning's `get_available_flops`; a GPU it does not know has no MFU), a CPU's measured, or
--peak-tflops. Goals (gpu/report.py), printed pass or FAIL beside each table: xfmr-train at most
nanoGPT's ms/step eager and compiled, with validation loss within SEED_NOISE of nanoGPT's;
reduce-overhead at most CUDA_GRAPHS_GOAL x nanoGPT's compiled ms/step; the GPT-2-shaped
compile=true run at MFU_GOAL of the peak or more.

Time on one H100 (an estimate, not measured): `--steps 300 --gpt2-steps 30` is ten training
runs and a profile, about 8-10 minutes, most of it six cold compiles of about a minute each;
the timed steps take under a minute. --steps 5000 adds a few minutes per Shakespeare run.
Rows are printed to stderr and written to --out-json as each run ends, so a run cut short
keeps what it measured. --device cpu runs the same path on a CPU (nanoGPT in float32 there);
--tiny shrinks both models for a quick check.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import lightning
import torch
import yaml

from common import nanogpt
from common.cli import add_nanogpt, add_shakespeare, command_line, script_parser
from common.nanogpt import SETTLE_STEPS
from common.xfmr_runs import (
    QUIET,
    Shape,
    flops_per_token,
    shakespeare_run,
    validation_blocks,
    xfmr_train,
)
from gpu.report import NANOGPT, XFMR, Report, Row, print_header, print_table
from xfmr.config.trainer import device_precision
from xfmr.runs.evaluation import evaluate_loss
from xfmr.training.throughput import Peak, device_name, mfu, precision_dtype, resolve_peak

SHAKESPEARE = Shape(d_model=384, n_layers=6, n_heads=6, block_size=256, batch_size=64)
GPT2_SMALL = Shape(d_model=768, n_layers=12, n_heads=12, block_size=1024, batch_size=16)
TINY_SHAKESPEARE = Shape(d_model=64, n_layers=2, n_heads=2, block_size=32, batch_size=4)
TINY_GPT2 = Shape(d_model=64, n_layers=2, n_heads=2, block_size=64, batch_size=2)
DROPOUT = 0.2
LR = 1e-3  # nanoGPT's learning_rate in config/train_shakespeare_char.py
WARMUP = 100  # nanoGPT's warmup_iters
# xfmr's `compile` values, eager first; nanoGPT's --compile has the first two. auto (the
# default) is measured as what it chose, reduce-overhead on one GPU at these fixed shapes.
COMPILE_MODES = ("false", "true", "reduce-overhead")
# max-autotune: also searches the compiler's kernel configurations (a longer first step).
CHOSEN_MODES = (*COMPILE_MODES, "max-autotune", "auto")
NANOGPT_MODES = ("false", "true")
GPT2_VOCAB = 50304  # GPT-2's 50,257 tokens padded to a multiple of 64, as nanoGPT pads them
FIRST_STEP = re.compile(r"compile=\S+: the first step took ([\d.]+) s")
AUTO_LINE = re.compile(r"(compile=auto: .*)$", re.MULTILINE)


@dataclass(frozen=True)
class Setup:
    """What every run of one benchmark shares."""

    device: str
    precision: str  # Lightning's, every xfmr run's; nanoGPT's dtype is the same
    data: Path
    out: Path
    copy: Path  # nanoGPT's temporary copy
    vocab_size: int
    peak: Peak | None
    peak_tflops: float | None  # --peak-tflops, passed on to xfmr-train


def xfmr_overrides(shape: Shape, setup: Setup, steps: int) -> list[str]:
    overrides = [
        *shakespeare_run(setup.data, steps, shape),
        f"optim.lr={LR}",
        f"schedule.warmup_steps={min(WARMUP, max(1, steps // 5))}",
        f"trainer.accelerator={'gpu' if setup.device == 'cuda' else 'cpu'}",
        f"trainer.precision={setup.precision}",
        "trainer.enable_model_summary=false",
        "logger=none",
        *QUIET,
    ]
    if setup.peak_tflops is not None:
        overrides.append(f"throughput.peak_tflops={setup.peak_tflops}")
    return overrides


def compile_fallback(output: str) -> str | None:
    """The line in which a compiled run says steps ran eagerly (`CompiledStep`'s warnings: a
    compile that failed, a batch shape past its CUDA graphs), if any."""
    said = ("failed (", "runs eagerly")
    lines = (line for line in output.splitlines() if "compile=" in line)
    return next((line.strip() for line in lines if any(s in line for s in said)), None)


def run_xfmr(
    table: str, shape: Shape, setup: Setup, steps: int, mode: str, extra=(), added: str = ""
):
    """One xfmr-train run; its Row (compile=auto's row named by what it chose, followed by
    `added`, a setting the row adds to the mode's, "+KEY=VALUE") and run directory."""
    overrides = [*xfmr_overrides(shape, setup, steps), f"compile={mode}", *extra]
    run_dir = setup.out / f"xfmr-{table}-compile-{mode}{added.replace('=', '-')}"
    finished = xfmr_train(overrides, run_dir, setup.out / "cache")
    (run_dir / "xfmr-train.log").write_text(finished.output)  # what a user of it would read
    results = finished.results
    chosen = mode
    if mode == "auto":
        ran = yaml.safe_load((run_dir / "config.yaml").read_text())["compile"]
        chosen = "false" if ran is False else "true" if ran == "default" else str(ran)
    row = Row(table, XFMR, chosen + added, results["precision"], results["ms_per_step"])
    said = AUTO_LINE.search(finished.output)  # auto's choice, said on a GPU only
    fallback = compile_fallback(finished.output) if chosen != "false" else None
    row.note = fallback or (said[1].strip() if said else None)
    first = FIRST_STEP.search(finished.output)
    row.first_step_s = float(first[1]) if first else None
    return row, run_dir


def nanogpt_args(
    shape: Shape, setup: Setup, steps: int, mode: str, out_dir: Path, *, scored: bool
) -> list[str]:
    """train.py's command line: nanoGPT's GPU Shakespeare config at `shape`, `steps` updates.
    `scored`: its checkpoint holds the weights after exactly `steps` (saved at the evaluation of
    iteration `steps`); otherwise only iteration 0 is evaluated and nothing is saved."""
    args = [
        nanogpt.CONFIG,
        f"--device={setup.device}",
        f"--compile={mode == 'true'}",
        *nanogpt.shape_args(shape),
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        f"--warmup_iters={min(WARMUP, max(1, steps // 5))}",
        f"--eval_interval={steps if scored else steps + 1}",
        "--eval_iters=2",  # its own estimate is not used: runs are scored on xfmr's blocks
        "--log_interval=1",
        f"--always_save_checkpoint={scored}",
        f"--out_dir={out_dir}",
    ]
    return args + ([] if setup.device == "cuda" else ["--dtype=float32"])  # autocasts on CUDA


def run_nanogpt(table: str, shape: Shape, setup: Setup, steps: int, mode: str, extra=()):
    """One run of nanoGPT's train.py; its Row and checkpoint (saved where `table` is scored)."""
    out_dir = setup.copy / f"out-{table}-compile-{mode}"
    scored = table == "shakespeare"
    args = [*nanogpt_args(shape, setup, steps, mode, out_dir, scored=scored), *extra]
    iterations = nanogpt.train(setup.copy, args)
    step_ms = nanogpt.timed_ms(iterations, eval_interval=steps)  # evaluation iterations left out
    dtype = "float32" if setup.device != "cuda" else nanogpt_cuda_dtype()
    return Row(table, NANOGPT, mode, dtype, statistics.median(step_ms)), out_dir / "ckpt.pt"


def nanogpt_cuda_dtype() -> str:
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def with_mfu(row: Row, shape: Shape, token_flops: float, peak: Peak | None) -> Row:
    """The row with its MFU: FLOPs per token `token_flops` at its ms/step over `peak`."""
    if peak is not None:
        tokens_per_s = shape.tokens_per_step / (row.ms_per_step / 1000.0)
        row.mfu = mfu(tokens_per_s, token_flops, peak.flops)
    return row


def shakespeare_rows(args, setup: Setup, report: Report) -> None:
    shape = TINY_SHAKESPEARE if args.tiny else SHAKESPEARE
    dropout = [f"model.dropout={DROPOUT}", f"model.attn_dropout={DROPOUT}"]
    fpt = flops_per_token(shape, setup.vocab_size)
    for mode in compile_modes(args):
        xfmr_row, run_dir = run_xfmr("shakespeare", shape, setup, args.steps, mode, dropout)
        xfmr_run, loader = validation_blocks(run_dir, device=setup.device)
        xfmr_row.val_loss = evaluate_loss(xfmr_run, loader)["loss"]
        report.add(with_mfu(xfmr_row, shape, fpt, setup.peak))
        if mode in NANOGPT_MODES:
            nanogpt_row, checkpoint = run_nanogpt("shakespeare", shape, setup, args.steps, mode)
            with contextlib.redirect_stdout(sys.stderr):  # its model prints its size
                nanogpt_row.val_loss = nanogpt.checkpoint_loss(
                    setup.copy, checkpoint, xfmr_run, loader, device=setup.device
                )
            report.add(with_mfu(nanogpt_row, shape, fpt, setup.peak))


def gpt2_rows(args, setup: Setup, report: Report, table: str) -> None:
    """Speed only: no run is scored, none saves its weights. Table gpt2_vocab: GPT-2's padded
    vocabulary over the same characters (xfmr: model.vocab_multiple; nanoGPT: its default
    vocabulary, read from a dataset folder without the characters' meta.pkl)."""
    shape = gpt2_shape(args)
    unsaved = ["callbacks.model_checkpoint=null", "trainer.limit_val_batches=2"]
    no_bias = ["--bias=False", "--dropout=0.0"]
    vocab_size = setup.vocab_size
    if table == "gpt2_vocab":
        vocab_size = GPT2_VOCAB
        unsaved.append(f"model.vocab_multiple={GPT2_VOCAB}")
        no_bias.append(f"--dataset={nanogpt.without_vocabulary(setup.copy)}")
    fpt = flops_per_token(shape, vocab_size)
    for mode in compile_modes(args):
        row, _ = run_xfmr(table, shape, setup, args.gpt2_steps, mode, unsaved)
        report.add(with_mfu(row, shape, fpt, setup.peak))
        if mode in NANOGPT_MODES:
            row, _ = run_nanogpt(table, shape, setup, args.gpt2_steps, mode, no_bias)
            report.add(with_mfu(row, shape, fpt, setup.peak))
    for chunk in args.loss_chunk:  # the lever's share, beside the plain rows
        for mode in compile_modes(args):
            chunked = [*unsaved, f"objective.loss_chunk={chunk}"]
            row, _ = run_xfmr(
                table, shape, setup, args.gpt2_steps, mode, chunked, f"+loss_chunk={chunk}"
            )
            report.add(with_mfu(row, shape, fpt, setup.peak))


def gpt2_tables(args) -> list[str]:
    return {"chars": ["gpt2"], "gpt2": ["gpt2_vocab"], "both": ["gpt2", "gpt2_vocab"]}[
        args.gpt2_vocab
    ]


def compile_modes(args) -> tuple[str, ...]:
    return tuple(args.modes) if args.compile else COMPILE_MODES[:1]


def gpt2_shape(args) -> Shape:
    return TINY_GPT2 if args.tiny else replace(GPT2_SMALL, batch_size=args.gpt2_batch)


def profile_gpt2(args, setup: Setup) -> None:
    """A few steps of the GPT-2-shaped model (GPT-2's vocabulary with --gpt2-vocab gpt2), eager
    or with --profile-mode's compile, under torch.profiler, in xfmr-train's own process
    (`xfmr.training.profiling.ProfileSteps`, which prints where the step goes once they are
    recorded), its tables printed here. A compiled step's kernels are the compiler's own
    (fused Triton kernels), attributed to the compiled graph that launched them."""
    steps = SETTLE_STEPS + args.profile_steps + 2
    vocabulary = [f"model.vocab_multiple={GPT2_VOCAB}"] if args.gpt2_vocab == "gpt2" else []
    overrides = [
        *xfmr_overrides(gpt2_shape(args), setup, steps),
        *vocabulary,
        f"compile={args.profile_mode}",  # eager by default: auto would replay CUDA graphs
        "callbacks.model_checkpoint=null",
        "+callbacks.profile._target_=xfmr.training.profiling.ProfileSteps",
        f"+callbacks.profile.skip={SETTLE_STEPS}",
        f"+callbacks.profile.steps={args.profile_steps}",
    ]
    finished = xfmr_train(overrides, setup.out / "xfmr-gpt2-profile", setup.out / "cache")
    profile = printed_profile(finished.output)
    mode = f", compile={args.profile_mode}"
    print(f"\ntorch.profiler, GPT-2-small-shaped, {setup.precision}{mode}: {profile}")


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


def parse_args() -> argparse.Namespace:
    parser = script_parser(__doc__)
    add_nanogpt(parser)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_shakespeare"))
    parser.add_argument("--out-json", type=Path, help="every row and goal, written as measured")
    parser.add_argument("--steps", type=int, default=5000, help="for every run (nanoGPT: 5000)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="2 layers, d 64: a quick check")
    eager_only = "eager rows only: no compile=true, no reduce-overhead"
    parser.add_argument("--no-compile", dest="compile", action="store_false", help=eager_only)
    parser.add_argument("--gpt2-batch", type=int, default=GPT2_SMALL.batch_size)
    parser.add_argument("--gpt2-steps", type=int, default=30)
    parser.add_argument("--no-gpt2", dest="gpt2", action="store_false")
    parser.add_argument(
        "--gpt2-vocab",
        choices=("chars", "gpt2", "both"),
        default="chars",
        help=f"the GPT-2-shaped model's vocabulary: the characters, GPT-2's {GPT2_VOCAB}, or both",
    )
    parser.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=list(COMPILE_MODES),
        help=f"xfmr's compile values to run, comma-separated, of {','.join(CHOSEN_MODES)}",
    )
    parser.add_argument(
        "--loss-chunk",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[],
        help="the GPT-2-shaped xfmr runs again with objective.loss_chunk=N, each N and mode "
        "(comma-separated)",
    )
    parser.add_argument("--profile-steps", type=int, default=5)
    parser.add_argument(
        "--profile-mode",
        choices=COMPILE_MODES[:2],
        default="false",
        help="the profiled steps' compile: eager (false) or compiled (true)",
    )
    parser.add_argument("--peak-tflops", type=float, help="instead of the datasheet's peak")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU here; --device cpu runs the same path on the CPU")
    if not set(args.modes) <= set(CHOSEN_MODES):
        sys.exit(f"--modes={','.join(args.modes)}: give some of {','.join(CHOSEN_MODES)}")
    if min(args.steps or SETTLE_STEPS + 2, args.gpt2_steps) <= SETTLE_STEPS + 1:
        sys.exit(
            f"--steps and --gpt2-steps: give more than {SETTLE_STEPS + 1} (5..N are timed); "
            "--steps 0 leaves the Shakespeare table out"
        )
    return args


def header(args, device: torch.device, precision: str, peak: Peak | None) -> dict:
    return {
        "command": command_line(),
        "device": device_name(device),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "precision": precision,
        "peak_flops": peak.flops if peak else None,
        "peak_flops_source": peak.source if peak else None,
        "steps": args.steps,
        "gpt2_steps": args.gpt2_steps,
        "tables": {
            "shakespeare": shape_record(TINY_SHAKESPEARE if args.tiny else SHAKESPEARE),
            "gpt2": shape_record(gpt2_shape(args)),
        },
    }


def shape_record(shape: Shape) -> dict:
    names = ("n_layers", "n_heads", "d_model", "block_size", "batch_size")
    return {name: getattr(shape, name) for name in names}


def no_peak_reason(device: torch.device, precision: str) -> str:
    dtype = str(precision_dtype(precision)).removeprefix("torch.")
    return (
        f"Lightning's get_available_flops has no dense {dtype} figure for "
        f"{device_name(device)}; --peak-tflops gives one"
    )


def main() -> None:
    args = parse_args()
    out, data = args.out.resolve(), args.data.resolve()
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    precision = device_precision("gpu" if args.device == "cuda" else "cpu")  # auto's choice
    peak = resolve_peak(device, precision, given_tflops=args.peak_tflops, cache_dir=out / "cache")
    report = Report(header(args, device, precision, peak), args.out_json)
    print_header(report.header, no_peak_reason(device, precision))
    vocab_size = len(set(data.read_text(encoding="utf-8")))
    with nanogpt.temporary_copy(args.nanogpt, data) as copy:
        setup = Setup(args.device, precision, data, out, copy, vocab_size, peak, args.peak_tflops)
        if args.steps:
            shakespeare_rows(args, setup, report)
        for table in gpt2_tables(args) if args.gpt2 else []:
            gpt2_rows(args, setup, report, table)
    shakespeare = TINY_SHAKESPEARE if args.tiny else SHAKESPEARE
    if args.steps:
        print_table("shakespeare", shakespeare, args.steps, vocab_size, report.rows)
    for table in gpt2_tables(args) if args.gpt2 else []:
        vocab = GPT2_VOCAB if table == "gpt2_vocab" else vocab_size
        print_table(table, gpt2_shape(args), args.gpt2_steps, vocab, report.rows)
    if args.gpt2 and args.profile_steps:
        profile_gpt2(args, setup)


if __name__ == "__main__":
    main()
