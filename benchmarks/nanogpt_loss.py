"""nanoGPT's CPU run on tiny Shakespeare, through xfmr-train and through nanoGPT's own train.py,
for several seeds, both scored on the same validation blocks.

    python benchmarks/nanogpt_loss.py --nanogpt ../shared/third_party/nanoGPT \\
        --data ../shared/data/tinyshakespeare/input.txt

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

Then the two programs' mean losses: Welch's difference with its 95% interval, and the TOST that
it lies within ±MARGIN (0.01 nats, fixed before the runs), over --seeds (default 1-10: the seeds
`xfmr-compare --detect 0.01` plans for that margin with the spread of an earlier comparison).
Each finished seed is kept in OUT/rows-STEPS.jsonl, so a stopped call resumes at the next.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from common import nanogpt
from common.cli import add_nanogpt, add_shakespeare, script_parser
from common.xfmr_runs import QUIET, validation_blocks, xfmr_train
from xfmr.runs.evaluation import evaluate_loss

EVAL_EVERY = 250  # nanoGPT's train_shakespeare_char and xfmr's experiment both
# The equivalence margin, fixed before the runs it judges: 0.01 nats is 1% in perplexity
# (e^0.01 = 1.010), well under the spread between seeds of either program (about 0.007).
MARGIN = 0.01


def run_xfmr(data: Path, out: Path, steps: int, seed: int) -> dict:
    overrides = [
        "experiment=nanogpt_shakespeare_char",
        f"data.path={data}",
        f"seed={seed}",
        f"trainer.max_steps={steps}",
        *QUIET,
    ]
    finished = xfmr_train(overrides, out / f"xfmr-seed{seed}", out / "cache")
    results = finished.results
    return {
        "run": "xfmr-train",
        "seed": seed,
        "run_dir": finished.run_dir,
        "ms_per_step": results["ms_per_step"],
        "wall_s": finished.wall_s,
        "own_val_loss": results["metrics"]["val/loss"],
    }


def run_nanogpt(copy: Path, steps: int, seed: int) -> dict:
    nanogpt.seeded_copy(copy, seed)
    out_dir = copy / f"out-seed{seed}"
    eval_every = EVAL_EVERY if steps % EVAL_EVERY == 0 else steps
    args = [
        nanogpt.CONFIG,  # then the README's CPU command line
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
    iterations = nanogpt.train(copy, args)
    wall = time.perf_counter() - started
    return {
        "run": "nanoGPT train.py",
        "seed": seed,
        "checkpoint": out_dir / "ckpt.pt",
        "ms_per_step": statistics.median(nanogpt.timed_ms(iterations, eval_interval=eval_every)),
        "wall_s": wall,
    }


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


def equivalence(rows: list[dict]) -> None:
    """Welch's difference of the two programs' mean losses with its 95% interval, and the TOST
    that it lies within ±MARGIN (`xfmr.runs.compare`): the seeds are not shared, so unpaired."""
    from xfmr.runs.compare.stats import welch
    from xfmr.runs.compare.verdicts import equivalence_verdict, tost

    ours = [row["val_loss"] for row in rows if row["run"] == "xfmr-train"]
    theirs = [row["val_loss"] for row in rows if row["run"] != "xfmr-train"]
    if min(len(ours), len(theirs)) < 2:
        return
    difference = welch(ours, theirs)
    low, high = difference.low, difference.high
    print(
        f"\nxfmr - nanoGPT: {difference.delta:+.4f} [{low:+.4f}, {high:+.4f}] (Welch 95%, "
        f"p = {difference.p_value:.3g}); TOST within ±{MARGIN:g}: p = "
        f"{tost(difference, MARGIN):.3g}; verdict: {equivalence_verdict(difference, MARGIN)}"
    )


def main() -> None:
    parser = script_parser(__doc__)
    add_nanogpt(parser)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/nanogpt_loss"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = args.data.resolve()
    # One line per finished seed, so a stopped call resumes at the next seed.
    done_file = out / f"rows-{args.steps}.jsonl"
    done = []
    if done_file.exists():
        done = [json.loads(line) for line in done_file.read_text().splitlines()]
    rows = [row for row in done if row["seed"] in args.seeds]
    with nanogpt.temporary_copy(args.nanogpt, data) as copy:
        for seed in args.seeds:
            if any(row["seed"] == seed for row in rows):
                continue
            xfmr_row = run_xfmr(data, out, args.steps, seed)
            nanogpt_row = run_nanogpt(copy, args.steps, seed)
            xfmr_run, loader = validation_blocks(xfmr_row["run_dir"])
            xfmr_row["val_loss"] = evaluate_loss(xfmr_run, loader)["loss"]
            if abs(xfmr_row["val_loss"] - xfmr_row["own_val_loss"]) > 1e-3:  # same blocks?
                print(f"note: results.json has val/loss {xfmr_row['own_val_loss']:.4f}")
            nanogpt_row["val_loss"] = nanogpt.checkpoint_loss(
                copy, nanogpt_row["checkpoint"], xfmr_run, loader
            )
            with done_file.open("a") as file:
                for row in (xfmr_row, nanogpt_row):
                    file.write(json.dumps(row, default=str) + "\n")
            rows += [xfmr_row, nanogpt_row]
    rows.sort(key=lambda row: (row["run"] != "xfmr-train", row["seed"]))
    print_table(rows, args.steps)
    equivalence(rows)


if __name__ == "__main__":
    main()
