"""nanoGPT's CPU run on tiny Shakespeare, through xfmr-train and through nanoGPT's own train.py,
for several seeds, both scored on the same validation blocks.

    python benchmarks/nanogpt_loss.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt --seeds 1337 1338 1339

Both train the README's "I only have a macbook" model (4 layers, 4 heads, d 128, block 64,
batch 12, no dropout, lr 1e-3 -> 1e-4 over --steps, default 2000). xfmr runs
`xfmr-train experiment=nanogpt_shakespeare_char seed=S`. nanoGPT runs in a temporary copy with
its shakespeare_char data prepared there from --data (offline, as its README says); its
train.py seeds torch with a fixed 1337, so the copy's one `torch.manual_seed(1337 + ...)` line
is changed to the seed (the only change; seed 1337 runs it as shipped), and
--always_save_checkpoint=True keeps the weights after the last step rather than the best of
its 20-batch estimates.

Scoring: xfmr validates on every non-overlapping block of the last 10% of the text. nanoGPT's
ckpt.pt is loaded with its own model class from the copy and run over those same blocks (the
characters mapped through its meta.pkl), the loss averaged over every target token the same
way. ms/step: xfmr's results.json (median, validation excluded); nanoGPT's printed step times,
median of steps 6..N without the evaluation steps.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_throughput import NANOGPT_LINE, SETTLE_STEPS, prepare_nanogpt  # noqa: E402

from xfmr.objectives import IGNORE_INDEX  # noqa: E402
from xfmr.runs.evaluation import attach_data, evaluate_loss  # noqa: E402
from xfmr.runs.loading import load_run  # noqa: E402

SEED_LINE = "torch.manual_seed(1337 + seed_offset)"
EVAL_EVERY = 250  # nanoGPT's train_shakespeare_char and xfmr's experiment both


def run_xfmr(data: Path, out: Path, steps: int, seed: int) -> dict:
    run_dir = out / f"xfmr-seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "xfmr.cli.train",
        "experiment=nanogpt_shakespeare_char",
        f"data.path={data}",
        f"seed={seed}",
        f"trainer.max_steps={steps}",
        f"hydra.run.dir={run_dir}",
        "callbacks.progress_bar=null",
        "callbacks.text_sample=null",
        "print_config=false",
    ]
    started = time.perf_counter()
    env = {**os.environ, "XFMR_CACHE_DIR": str(out / "cache")}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - started
    results = json.loads((run_dir / "results.json").read_text())
    return {
        "run": "xfmr-train",
        "seed": seed,
        "run_dir": run_dir,
        "ms_per_step": results["ms_per_step"],
        "wall_s": wall,
        "own_val_loss": results["metrics"]["val/loss"],
    }


def seeded_copy(copy: Path, seed: int) -> None:
    """train.py with `seed` where it seeds torch with 1337."""
    train = copy / "train.py"
    original = copy / "train.py.orig"
    if not original.is_file():
        shutil.copyfile(train, original)
    source = original.read_text()
    if source.count(SEED_LINE) != 1:
        sys.exit(f"{original}: expected the line {SEED_LINE!r} once, to set the seed")
    train.write_text(source.replace(SEED_LINE, f"torch.manual_seed({seed} + seed_offset)"))


def run_nanogpt(copy: Path, steps: int, seed: int) -> dict:
    seeded_copy(copy, seed)
    out_dir = copy / f"out-seed{seed}"
    eval_every = EVAL_EVERY if steps % EVAL_EVERY == 0 else steps
    args = [
        "config/train_shakespeare_char.py",  # then the README's CPU command line
        "--device=cpu",
        "--compile=False",
        "--eval_iters=20",
        "--log_interval=1",
        "--block_size=64",
        "--batch_size=12",
        "--n_layer=4",
        "--n_head=4",
        "--n_embd=128",
        f"--max_iters={steps}",
        f"--lr_decay_iters={steps}",
        "--dropout=0.0",
        f"--eval_interval={eval_every}",
        "--always_save_checkpoint=True",
        f"--out_dir={out_dir}",
    ]
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "train.py", *args], cwd=copy, check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    step_ms = [
        float(m[3])
        for m in NANOGPT_LINE.finditer(result.stdout)
        if int(m[1]) >= SETTLE_STEPS and int(m[1]) % eval_every  # evaluation steps excluded
    ]
    return {
        "run": "nanoGPT train.py",
        "seed": seed,
        "checkpoint": out_dir / "ckpt.pt",
        "ms_per_step": statistics.median(step_ms),
        "wall_s": wall,
    }


def validation_blocks(xfmr_run: Path, device: str = "cpu"):
    """xfmr's validation batches of the run's data, and the run loaded at its last step."""
    run = load_run(xfmr_run, checkpoint="last", device=device)
    datamodule = attach_data(run, run.config.data)
    return run, datamodule.val_dataloader()


@torch.no_grad()
def nanogpt_loss(copy: Path, checkpoint: Path, xfmr_run, loader, device: str = "cpu") -> float:
    """Loss of nanoGPT's checkpoint over every target token of xfmr's validation blocks, in
    float32 on `device`."""
    sys.path.insert(0, str(copy))
    from model import GPT, GPTConfig  # nanoGPT's own model class, from the copy

    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**saved["model_args"]))
    prefix = "_orig_mod."
    model.load_state_dict({k.removeprefix(prefix): v for k, v in saved["model"].items()})
    model.to(device).eval()
    with open(copy / "data" / "shakespeare_char" / "meta.pkl", "rb") as f:
        stoi = pickle.load(f)["stoi"]
    # xfmr id -> nanoGPT id, through the character; -1 for xfmr's own specials.
    to_nanogpt = torch.tensor([stoi.get(piece, -1) for piece in xfmr_run.tokenizer.pieces()])
    total, counted = 0.0, 0
    for batch in loader:
        inputs = to_nanogpt[batch["input_ids"]]  # (B, T)
        labels = batch["labels"]
        targets = torch.where(labels == IGNORE_INDEX, -1, to_nanogpt[labels.clamp(min=0)])
        if (inputs < 0).any() or ((targets < 0) & (labels != IGNORE_INDEX)).any():
            sys.exit("a validation block holds a character nanoGPT's vocabulary lacks")
        logits, _ = model(inputs.to(device), targets.to(device))  # with targets: every position
        total += float(
            F.cross_entropy(
                logits.flatten(0, 1).float(),
                targets.to(device).flatten(),
                reduction="sum",
                ignore_index=-1,
            )
        )
        counted += int((targets >= 0).sum())
    return total / counted


def print_table(rows: list[dict], steps: int) -> None:
    print(f"\n{steps} steps; val loss over every validation block of xfmr's split\n")
    print("| run | seed | val loss | ms/step | wall s |\n|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['run']} | {row['seed']} | {row['val_loss']:.4f} | "
            f"{row['ms_per_step']:.1f} | {row['wall_s']:.0f} |"
        )
    print("\n| run | seeds | val loss mean | std | ms/step mean |\n|---|---:|---:|---:|---:|")
    for name in dict.fromkeys(row["run"] for row in rows):
        mine = [row for row in rows if row["run"] == name]
        losses = [row["val_loss"] for row in mine]
        spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
        ms = statistics.fmean(row["ms_per_step"] for row in mine)
        print(
            f"| {name} | {len(mine)} | {statistics.fmean(losses):.4f} | {spread:.4f} | {ms:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, required=True, help="nanoGPT's directory")
    parser.add_argument("--data", type=Path, required=True, help="tinyshakespeare input.txt")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/nanogpt_loss"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338, 1339])
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"--data {args.data}: no such file (tinyshakespeare input.txt)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="nanogpt-") as work:
        copy = prepare_nanogpt(args.nanogpt.resolve(), data, Path(work))
        for seed in args.seeds:
            xfmr_row = run_xfmr(data, out, args.steps, seed)
            nanogpt_row = run_nanogpt(copy, args.steps, seed)
            xfmr_run, loader = validation_blocks(xfmr_row["run_dir"])
            xfmr_row["val_loss"] = evaluate_loss(xfmr_run, loader)["loss"]
            if abs(xfmr_row["val_loss"] - xfmr_row["own_val_loss"]) > 1e-3:  # same blocks?
                print(f"note: results.json has val/loss {xfmr_row['own_val_loss']:.4f}")
            nanogpt_row["val_loss"] = nanogpt_loss(
                copy, nanogpt_row["checkpoint"], xfmr_run, loader
            )
            rows += [xfmr_row, nanogpt_row]
    rows.sort(key=lambda row: row["run"] != "xfmr-train")
    print_table(rows, args.steps)


if __name__ == "__main__":
    main()
