"""Running xfmr-train for a benchmark, and reading what its run leaves behind.

The one place that knows the command (`python -m xfmr.cli.train` in this interpreter), the
environment a child gets (its cache directory; benchmarks/ on PYTHONPATH when it loads a
script's callback), the run directory's files (results.json, csv/metrics.csv), composing the
same config in this process, the GPT shape a benchmark gives both xfmr-train and nanoGPT, and
the overrides that several scripts give a run alike.

The module imports the standard library alone; torch, Hydra and xfmr load inside the functions
that need them, so a plain PyTorch loop or a child that imports a script for its callback loads
no more than before.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]

# What a script's run leaves out, as nothing a table reads comes from it: the config printed
# at the start, the progress bar, the text sample written after training.
QUIET = ("print_config=false", "callbacks.progress_bar=null", "callbacks.text_sample=null")


@dataclass(frozen=True)
class Shape:
    """A GPT's shape, as a benchmark gives it to xfmr-train and nanoGPT alike."""

    d_model: int
    n_layers: int
    n_heads: int
    block_size: int
    batch_size: int

    @property
    def tokens_per_step(self) -> int:
        return self.block_size * self.batch_size

    def overrides(self) -> list[str]:
        """xfmr-train's overrides for this shape (nanoGPT's flags: `nanogpt.shape_args`)."""
        return [
            f"model.d_model={self.d_model}",
            f"model.n_layers={self.n_layers}",
            f"model.n_heads={self.n_heads}",
            f"data.block_size={self.block_size}",
            f"data.batch_size={self.batch_size}",
        ]


def shakespeare_run(data: Path, steps: int, shape: Shape | None = None) -> list[str]:
    """xfmr-train's overrides for nanoGPT's Shakespeare experiment on `data`, at `shape` where
    one is given, for `steps` steps, validated once after the last and not before the first."""
    return [
        "experiment=nanogpt_shakespeare_char",
        f"data.path={data}",
        *(shape.overrides() if shape else ()),
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "trainer.num_sanity_val_steps=0",
    ]


def flops_per_token(shape: Shape, vocab_size: int) -> float:
    """Training FLOPs per token of xfmr's decoder at `shape` (no bias, learned positions):
    nanoGPT's 6N + 12*L*H*Q*T, counted by `xfmr.training.throughput.TrainingFlops`."""
    from xfmr.nn import ModelConfig, build_model
    from xfmr.training.throughput import TrainingFlops

    config = ModelConfig(
        vocab_size=vocab_size,
        n_layers=shape.n_layers,
        n_heads=shape.n_heads,
        d_model=shape.d_model,
        bias=False,
        pos={"name": "learned", "max_positions": shape.block_size},
    )
    return TrainingFlops.of(build_model(config)).per_token(shape.block_size)


# ---------------------------------------------------------------- xfmr-train in a child process


def train_command(*overrides: str) -> list[str]:
    """`xfmr-train OVERRIDES` in this interpreter, so the child runs the xfmr this one imports."""
    return [sys.executable, "-m", "xfmr.cli.train", *overrides]


def child_env(cache_dir: Path, *, callbacks: bool = False, **variables: str) -> dict[str, str]:
    """This process's environment for a child: xfmr's caches (tokenizers, token caches, the
    matmul peak) in `cache_dir`, and `variables`. With `callbacks`, benchmarks/ comes first on
    PYTHONPATH, so that `+callbacks.NAME._target_=SCRIPT.Class` finds a class of a script here."""
    env = {**os.environ, "XFMR_CACHE_DIR": str(cache_dir), **variables}
    if callbacks:
        paths = [str(BENCHMARKS), os.environ.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


def run_quietly(command: list[str], **kwargs: Any) -> str:
    """The command's output (stdout, then stderr); on failure its tail, then exit."""
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        tail = output[-4000:]
        sys.exit(f"{shlex.join(command)}\nfailed ({result.returncode}); it printed:\n{tail}")
    return output


def run_timed(command: list[str], **kwargs: Any) -> tuple[str, float]:
    """`run_quietly`, and the seconds from the command's start to its exit."""
    started = time.perf_counter()
    output = run_quietly(command, **kwargs)
    return output, time.perf_counter() - started


@dataclass(frozen=True)
class Finished:
    """An xfmr-train run that ended well: where it went, what it printed, how long it took
    from the command's start to its exit."""

    run_dir: Path
    output: str
    wall_s: float

    @property
    def results(self) -> dict[str, Any]:
        return read_results(self.run_dir)


def xfmr_train(overrides: Sequence[str], run_dir: Path, cache_dir: Path) -> Finished:
    """`xfmr-train OVERRIDES hydra.run.dir=RUN_DIR` in a process of its own, its output kept
    (`run_quietly`: a failure prints its tail and exits). `run_dir` is emptied first: a run
    that finished there would be resumed and train no step."""
    shutil.rmtree(run_dir, ignore_errors=True)
    command = train_command(*overrides, f"hydra.run.dir={run_dir}")
    return Finished(run_dir, *run_timed(command, env=child_env(cache_dir)))


def read_results(run_dir: Path) -> dict[str, Any]:
    """The run's results.json: status, step, final metrics, ms_per_step, precision, ..."""
    return json.loads((run_dir / "results.json").read_text())


def logged_steps(run_dir: Path) -> list[dict[str, float]]:
    """Each logged step's values from the run's csv/metrics.csv (`logger=csv`), in step order,
    the rows of one step merged (a validation row carries no train/loss)."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    per_step: dict[int, dict[str, float]] = {}
    for row in rows:
        values = {k: float(v) for k, v in row.items() if v not in ("", None)}
        per_step.setdefault(int(values["step"]), {}).update(values)
    return [per_step[step] for step in sorted(per_step)]


# ---------------------------------------------------------------- in this process


def train_config(overrides: Sequence[str]) -> Any:
    """conf/train.yaml composed with `overrides` into the run's config (`xfmr.config.RunConfig`),
    checked and resolved as xfmr-train does: what `xfmr.training.run.run_training` takes in
    this process. Without Hydra's run the `paths.*` (root_dir, output_dir, cache_dir) are given
    as overrides."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from xfmr.config.make import run_config
    from xfmr.paths import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(overrides))
    return run_config(OmegaConf.to_container(cfg, resolve=True))


def validation_blocks(run_dir: Path, device: str = "cpu") -> tuple[Any, Any]:
    """The run loaded at its last step, and the validation batches of its data: every
    non-overlapping block of the split, as xfmr validates."""
    from xfmr.runs.evaluation import attach_data
    from xfmr.runs.loading import load_run

    run = load_run(run_dir, checkpoint="last", device=device)
    datamodule = attach_data(run, run.config.data)
    return run, datamodule.val_dataloader()
