"""Tiny runs: the text they train on, the smallest settings that still exercise every part of a
run, and reading what a finished run wrote."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

CORPUS = (
    "the quick brown fox jumps over the lazy dog.\n"
    "a small cat sees a big bird near the river.\n"
    "two owls watch the quiet moon at night.\n"
) * 40

# A fixed peak for mfu: a run otherwise times back-to-back matmuls for its CPU's peak FLOP/s
# (half a second of both cores, every run, as each test has a cache of its own), which
# tests/training/test_throughput.py tests on its own.
PEAK = "throughput.peak_tflops=1"

# Smallest settings that still exercise every part of a run.
TINY = [
    "size=tiny",
    "data.block_size=16",
    "data.batch_size=4",
    "trainer.max_steps=4",
    "schedule.warmup_steps=1",  # a warm-up longer than the run is refused
    "trainer.val_check_interval=2",
    "trainer.limit_val_batches=2",
    "trainer.num_sanity_val_steps=0",
    "trainer.enable_model_summary=false",
    "callbacks.progress_bar=null",
    "print_config=false",
    PEAK,
]

# A run a test stops and resumes: ten steps of a tiny model, validated every fourth.
RESUMABLE_STEPS = 10


def resumable(*, checkpoint_every: int) -> list[str]:
    """RESUMABLE_STEPS steps, with periodic checkpoints every `checkpoint_every` steps."""
    return [
        "size=tiny",
        "data.batch_size=4",
        f"trainer.max_steps={RESUMABLE_STEPS}",
        "trainer.val_check_interval=4",
        "schedule.warmup_steps=2",
        "trainer.limit_val_batches=2",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_model_summary=false",
        "callbacks.progress_bar=null",
        "callbacks.text_sample=null",
        f"callbacks.periodic_checkpoint.every_n_train_steps={checkpoint_every}",
        "print_config=false",
        PEAK,
    ]


# A sharded run (trainer=fsdp) on two CPU processes with gloo: one shard of every block each.
FSDP = ("trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2")


def read_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


@dataclass(frozen=True)
class TinyRun:
    """A finished run of TINY on CORPUS by the real `xfmr-train`: `dir`, its run directory, and
    `args`, the command line it was trained with (its hydra.run.dir aside), for a test that runs
    it again. Shared by the tests that only read a run (tests/conftest.py's `tiny_run`); a test
    that writes into a run (resumes it, evaluates it into eval.json) works on a `copy`."""

    dir: Path
    args: tuple[str, ...]

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.dir, to)
        return to
