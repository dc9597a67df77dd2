"""Kill a training run with SIGKILL at random moments, resume it with the same command each
time, and check that its final weights, optimizer state and metrics equal those of the same
run never interrupted.

    python benchmarks/fault_injection.py --kills 20 --seed 0

The run is a small GPT on text the script writes (or --data FILE): 200 steps, a validation
every 10, a periodic checkpoint every 4 steps. Each attempt is killed after a delay drawn
uniformly from 0.6 x the time an uninterrupted run takes to write its first checkpoint to that
time plus 10% of the rest of its run (or --max-delay), so kills land anywhere: while Python
starts, while the tokenizer or token cache is built, mid-step, mid-validation, mid-save. After --kills kills the run is left to finish. Prints one line per attempt (the step
the run had checkpointed when it was killed) and a verdict; exit status 1 if anything differs.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from common.cli import script_parser
from common.xfmr_runs import QUIET, child_env, read_results, train_command

STEPS = 200
ARGS = [
    "size=tiny",
    "data=text",
    "data.block_size=32",
    "data.batch_size=8",
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=10",
    "trainer.limit_val_batches=4",
    "callbacks.periodic_checkpoint.every_n_train_steps=4",
    *QUIET,
]


def command(data: Path, run_dir: Path) -> list[str]:
    return train_command(*ARGS, f"data.path={data}", f"hydra.run.dir={run_dir}")


def start(data: Path, run_dir: Path, env: dict[str, str]) -> subprocess.Popen:
    """The run in a process of its own, its output discarded."""
    return subprocess.Popen(
        command(data, run_dir), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def run(data: Path, run_dir: Path, env: dict[str, str], kill_after: float | None) -> int:
    """The run's exit status: its own, or SIGKILL's after `kill_after` seconds."""
    proc = start(data, run_dir, env)
    if kill_after is None:
        return proc.wait()
    try:
        return proc.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        return proc.wait()


def checkpointed_step(run_dir: Path) -> int | None:
    from xfmr.training.run import newest_checkpoint

    newest = newest_checkpoint(run_dir / "checkpoints")
    if newest is None:
        return None
    try:
        return int(
            torch.load(newest, map_location="cpu", weights_only=True, mmap=True)["global_step"]
        )
    except Exception:  # a file whose rename has not happened is not there; anything else: say so
        return -1


def final_state(run_dir: Path) -> tuple[dict, dict, dict]:
    checkpoint = torch.load(
        run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True
    )
    results = read_results(run_dir)
    kept = {k: results[k] for k in ("status", "step", "history")}
    kept["metrics"] = results["metrics"]  # the model's metrics (the timings are not among them)
    return checkpoint["state_dict"], checkpoint["optimizer_states"][0]["state"], kept


def differences(ours: tuple, theirs: tuple) -> list[str]:
    found = []
    for name, tensor in theirs[0].items():
        if name not in ours[0] or not torch.equal(ours[0][name], tensor):
            found.append(f"weight {name}")
    for index, state in theirs[1].items():
        for key, value in state.items():
            if not torch.equal(ours[1][index][key], value):
                found.append(f"optimizer state {index}.{key}")
    for key, value in theirs[2].items():
        if ours[2][key] != value:
            found.append(f"results.json {key}")
    return found


def main() -> None:
    args = arguments()
    work = Path(tempfile.mkdtemp(prefix="xfmr-faults-"))
    data = args.data.resolve() if args.data else written_corpus(work / "corpus.txt")
    env = child_env(work / "cache", PYTHONUNBUFFERED="1")

    # The tokenizer and token cache are built once, so the timed run below starts as every
    # attempt after it will.
    assert run(data, work / "prime", env, None) == 0, "the first run failed"
    first, whole = uninterrupted(data, work / "reference", env)
    low, high = 0.6 * first, args.max_delay or first + 0.1 * (whole - first)
    print(f"uninterrupted run: {whole:.1f} s, its first checkpoint after {first:.1f} s; killing")
    print(
        f"the other run {args.kills} times, each after a delay drawn from {low:.1f}..{high:.1f} s"
    )
    rng = random.Random(args.seed)
    delays = [rng.uniform(low, high) for _ in range(args.kills)]
    code = killed_and_resumed(data, work / "killed", env, delays)
    found = (
        differences(final_state(work / "killed"), final_state(work / "reference"))
        if code == 0
        else ["the run failed"]
    )
    print(
        "identical to the uninterrupted run" if not found else f"DIFFERS: {', '.join(found[:10])}"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if found else 0)


def arguments() -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill times")
    parser.add_argument("--data", type=Path, help="a text file (default: one written here)")
    parser.add_argument("--max-delay", type=float, help="seconds (default: 0.15 x a whole run)")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    return parser.parse_args()


def written_corpus(path: Path) -> Path:
    """3,000 lines of twelve words drawn from a few, written to `path`."""
    words = "the quick brown fox jumps over a lazy dog while two owls watch the moon".split()
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choices(words, k=12)) for _ in range(3000)))
    return path


def uninterrupted(data: Path, run_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """The reference run, never killed: seconds to its first periodic checkpoint (start-up and
    the steps before it), and to its end."""
    started = time.monotonic()
    reference = start(data, run_dir, env)
    while reference.poll() is None and not list((run_dir / "checkpoints").glob("step-*")):
        time.sleep(0.05)
    first = time.monotonic() - started
    assert reference.wait() == 0, "the uninterrupted run failed"
    return first, time.monotonic() - started


def killed_and_resumed(data: Path, run_dir: Path, env: dict[str, str], delays: list[float]) -> int:
    """The run in `run_dir` started with the same command again and again, each attempt killed
    after the next of `delays` unless it finishes first, then left to finish: its exit status."""
    code, kills = None, 0
    for attempt, delay in enumerate(delays, start=1):
        code = run(data, run_dir, env, delay)
        state = "finished first" if code == 0 else f"killed after {delay:.1f} s"
        kills += code != 0
        print(
            f"attempt {attempt:2d}: {state}; newest checkpoint at step {checkpointed_step(run_dir)}"
        )
        if code == 0:
            break
    if code != 0:
        code = run(data, run_dir, env, None)
        print(f"last attempt: exit {code}")
    print(f"{kills} kills")
    return code


if __name__ == "__main__":
    main()
