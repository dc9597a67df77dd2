"""A 16-trial TPE search on the nanoGPT config, with median pruning and without, side by side.

    python benchmarks/sweep_pruning.py --data ../shared/data/tinyshakespeare/input.txt

Runs `xfmr-train -m experiment=nanogpt_shakespeare_char hparams_search=nanogpt_lr` twice with
the same sampler seed, once with the search file's median pruner and once with
`hydra.sweeper.pruner=none`, and prints for each: trials completed and pruned, the best
val/loss, the optimizer steps trained in all, and the total wall time. `--steps` shortens each
trial (validation every tenth of it; no pruning in its first quarter).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from common.cli import add_shakespeare, script_parser
from common.xfmr_runs import QUIET, child_env, train_command


def run_search(data: Path, out: Path, *, pruned: bool, steps: int, trials: int, seed: int) -> dict:
    sweep = out / ("pruned" if pruned else "unpruned")
    pruner = (
        [f"hydra.sweeper.pruner_args.n_warmup_steps={steps // 4}"]
        if pruned
        else ["hydra.sweeper.pruner=none"]
    )
    cmd = train_command(
        "-m",
        "experiment=nanogpt_shakespeare_char",
        "hparams_search=nanogpt_lr",
        f"data.path={data}",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps // 10}",
        f"hydra.sweeper.n_trials={trials}",
        f"hydra.sweeper.sampler_args.seed={seed}",
        *pruner,
        f"hydra.sweep.dir={sweep}",
        *QUIET,
    )
    started = time.perf_counter()
    # A sweep with a failed trial exits non-zero; its sweep.json still says how every trial ended.
    subprocess.run(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_env(out / "cache"),
    )
    wall = time.perf_counter() - started
    summary = json.loads((sweep / "sweep.json").read_text())
    steps_trained = sum(job.get("step") or 0 for job in summary["jobs"])
    return {
        "search": "TPE + median pruning" if pruned else "TPE, no pruning",
        "completed": summary["counts"]["completed"],
        "pruned": summary["counts"]["pruned"],
        "failed": summary["counts"]["failed"],
        "best val/loss": summary["best"]["value"],
        "steps trained": steps_trained,
        "wall s": wall,
    }


def main() -> None:
    parser = script_parser(__doc__)
    add_shakespeare(parser)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_sweep_pruning"))
    parser.add_argument("--steps", type=int, default=1000, help="optimizer steps per trial")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1337, help="the TPE sampler's seed")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"--out {args.out} is not empty: a search there would resume, not start")
    rows = [
        run_search(
            args.data.resolve(),
            args.out.resolve(),
            pruned=pruned,
            steps=args.steps,
            trials=args.trials,
            seed=args.seed,
        )
        for pruned in (True, False)
    ]
    print(f"\n{args.trials} trials of {args.steps} steps, experiment=nanogpt_shakespeare_char\n")
    print("| search | completed | pruned | failed | best val/loss | steps trained | wall s |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        print(
            f"| {row['search']} | {row['completed']} | {row['pruned']} | {row['failed']} | "
            f"{row['best val/loss']:.4f} | {row['steps trained']} | {row['wall s']:.0f} |"
        )
    print(f"\npruning: {rows[0]['wall s'] / rows[1]['wall s']:.2f}x the wall time")


if __name__ == "__main__":
    main()
