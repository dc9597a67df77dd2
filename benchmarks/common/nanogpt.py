"""nanoGPT beside xfmr: its repository prepared offline, its train.py run and read, its model
class imported from its directory, and its checkpoints scored on xfmr's validation blocks.

Every script takes nanoGPT's directory as an argument (--nanogpt); nothing of nanoGPT's code is
copied into xfmr. A run works in a temporary copy (`temporary_copy`), so the repository given
is never written to.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .xfmr_runs import Shape, run_quietly

CONFIG = "config/train_shakespeare_char.py"  # train.py's first argument: the config it reads
SETTLE_STEPS = 5  # steps 1..5 are left out of the median, as nanoGPT leaves them out of its mfu
ITERATION_LINE = re.compile(r"iter (\d+): loss ([\d.]+), time ([\d.]+)ms")
SEED_LINE = "torch.manual_seed(1337 + seed_offset)"  # where train.py seeds torch


@contextlib.contextmanager
def temporary_copy(nanogpt: Path, data: Path) -> Iterator[Path]:
    """A copy of nanoGPT in a temporary directory, removed when the block ends, with
    shakespeare_char prepared there from `data` by its own prepare.py (no download)."""
    with tempfile.TemporaryDirectory(prefix="nanogpt-") as work:
        copy = Path(work) / "nanoGPT"
        ignored = shutil.ignore_patterns("out*", "*.bin", ".git")
        shutil.copytree(nanogpt.resolve(), copy, ignore=ignored)
        shutil.copyfile(data, copy / "data" / "shakespeare_char" / "input.txt")
        subprocess.run(
            [sys.executable, "data/shakespeare_char/prepare.py"],
            cwd=copy,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        yield copy


def without_vocabulary(copy: Path) -> str:
    """A dataset in the copy (its name, train.py's --dataset) with shakespeare_char's token
    files and no meta.pkl, so that train.py takes its default vocabulary, GPT-2's padded 50,304
    ("defaulting to vocab_size of GPT-2"), over the same character ids."""
    name = "shakespeare_char_gpt2_vocab"
    folder = copy / "data" / name
    folder.mkdir(exist_ok=True)
    for split in ("train.bin", "val.bin"):
        if not (folder / split).exists():
            (folder / split).symlink_to(copy / "data" / "shakespeare_char" / split)
    return name


def seeded_copy(copy: Path, seed: int) -> None:
    """The copy's train.py with `seed` where it seeds torch with 1337 (the only change; seed
    1337 runs it as shipped)."""
    train = copy / "train.py"
    original = copy / "train.py.orig"
    if not original.is_file():
        shutil.copyfile(train, original)
    source = original.read_text()
    if source.count(SEED_LINE) != 1:
        sys.exit(f"{original}: expected the line {SEED_LINE!r} once, to set the seed")
    train.write_text(source.replace(SEED_LINE, f"torch.manual_seed({seed} + seed_offset)"))


def shape_args(shape: Shape) -> list[str]:
    """train.py's flags for `shape` (xfmr-train's overrides: `Shape.overrides`)."""
    return [
        f"--n_layer={shape.n_layers}",
        f"--n_head={shape.n_heads}",
        f"--n_embd={shape.d_model}",
        f"--block_size={shape.block_size}",
        f"--batch_size={shape.batch_size}",
    ]


@dataclass(frozen=True)
class Iteration:
    """One line train.py printed: `iter N: loss L, time Tms` (every one with --log_interval=1;
    the loss read, and the time taken, as train.py does)."""

    number: int
    loss: float
    ms: float


def train(copy: Path, args: Sequence[str]) -> list[Iteration]:
    """`python train.py ARGS` in `copy`, quietly (a failure prints its tail and exits): the
    iterations it printed."""
    output = run_quietly([sys.executable, "train.py", *args], cwd=copy)
    return [Iteration(int(m[1]), float(m[2]), float(m[3])) for m in ITERATION_LINE.finditer(output)]


def timed_ms(iterations: list[Iteration], *, eval_interval: int | None = None) -> list[float]:
    """The times of iterations SETTLE_STEPS.., less those at multiples of `eval_interval`
    (where train.py evaluated, inside the iteration's time)."""
    return [
        it.ms
        for it in iterations
        if it.number >= SETTLE_STEPS and (eval_interval is None or it.number % eval_interval)
    ]


@functools.cache
def model_classes(nanogpt: Path) -> tuple[type, type]:
    """nanoGPT's `GPT` and `GPTConfig`, from the model.py in its directory `nanogpt`."""
    path = Path(nanogpt).resolve() / "model.py"
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    if spec is None or spec.loader is None:
        sys.exit(f"{path}: cannot import nanoGPT's model from it")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module.GPT, module.GPTConfig


def checkpoint_loss(
    copy: Path, checkpoint: Path, xfmr_run: Any, loader: Any, device: str = "cpu"
) -> float:
    """Loss of nanoGPT's checkpoint over every target token of xfmr's validation blocks
    (`xfmr_runs.validation_blocks`), in float32 on `device`, through nanoGPT's own model class
    (the copy's), the characters mapped through its meta.pkl."""
    import torch
    import torch.nn.functional as F

    from xfmr.objectives import IGNORE_INDEX

    GPT, GPTConfig = model_classes(copy)
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
    with torch.no_grad():
        for batch in loader:
            inputs = to_nanogpt[batch["input_ids"]]  # (B, T)
            labels = batch["labels"]
            targets = torch.where(labels == IGNORE_INDEX, -1, to_nanogpt[labels.clamp(min=0)])
            if (inputs < 0).any() or ((targets < 0) & (labels != IGNORE_INDEX)).any():
                sys.exit("a validation block holds a character nanoGPT's vocabulary lacks")
            # With targets nanoGPT returns the logits at every position, not the last alone.
            logits, _ = model(inputs.to(device), targets.to(device))
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
