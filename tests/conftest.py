"""Shared fixtures: tiny data written by the tests, the real CLI in a subprocess, one thread
for tiny tensors, and random weights for model tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from cli_processes import can_fork, run_module

CORPUS = (
    "the quick brown fox jumps over the lazy dog.\n"
    "a small cat sees a big bird near the river.\n"
    "two owls watch the quiet moon at night.\n"
) * 40


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors gain nothing from threads, and on a busy machine the threads only spin.

    A module asks for it with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@torch.no_grad()
def randomize(model: nn.Module, *, std: float, seed: int = 0) -> nn.Module:
    """Redraw every parameter: norm gains around one, everything else N(0, std^2), so that
    distributions are far from uniform, no two sequences tie and a weight mapped to the wrong
    place changes the logits. Eval mode."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            noise = torch.randn(param.shape, generator=generator)
            is_gain = name == "weight" and "norm" in type(module).__name__.lower()
            param.copy_(1.0 + 0.3 * noise if is_gain else std * noise)
    return model.eval()


# A fixed peak for mfu: a run otherwise times back-to-back matmuls for its CPU's peak FLOP/s
# (half a second of both cores, every run, as each test has a cache of its own), which
# tests/test_throughput.py tests on its own.
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


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(
    args: list[str],
    cwd: Path,
    *,
    timeout: float = 300,
    module: str = "xfmr.cli.train",
    env: dict[str, str] | None = None,
    fresh: bool = False,
) -> Completed:
    """`python -m module *args` in a process of its own: forked from a server that has the
    heavy imports done (tests/cli_processes.py), or a new interpreter with `fresh=True` or an
    environment that only a start-up reads."""
    env = {
        **os.environ,
        "XFMR_CACHE_DIR": str(cwd / ".cache"),
        "WANDB_MODE": "offline",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    env.pop("WANDB_API_KEY", None)
    if not fresh and can_fork(env):
        return Completed(*run_module(module, args, cwd=cwd, env=env, timeout=timeout))
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def read_results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def compose_config(tmp_path: Path, overrides: list[str]):
    """The real config tree composed for an in-process `run_training(cfg)`, resolved as the CLI
    would (trainer.precision=auto chosen for this machine, as `check_config` does), outputs under
    tmp_path; on a tiny text corpus the test writes unless `data=` is given."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from xfmr.checks import resolve_precision
    from xfmr.paths import config_dir

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    own_data = any(o.startswith("data=") for o in overrides)
    text_data = [] if own_data else ["data=text", f"data.path={corpus}", "data.block_size=16"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                *text_data,
                "data.batch_size=4",
                "trainer.max_steps=2",
                "schedule.warmup_steps=1",  # a warm-up longer than the run is refused
                "trainer.val_check_interval=2",
                "trainer.limit_val_batches=1",
                "trainer.num_sanity_val_steps=0",
                "trainer.enable_progress_bar=false",
                "callbacks.progress_bar=null",
                "logger=none",
                PEAK,
                f"paths.root_dir={tmp_path}",
                f"paths.output_dir={tmp_path / 'run'}",
                *overrides,
            ],
        )
    resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    resolve_precision(resolved)
    return resolved


# Modules whose tests train, start processes or compose every combination (most of the suite's
# time): `make test-fast` (-m "not slow") leaves them out for a loop of under a minute while
# editing; `make test` and CI run them.
SLOW_MODULES = {
    "test_adding_an_objective.py",
    "test_bad_input.py",
    "test_bert_pretraining.py",
    "test_cli_errors.py",
    "test_cli_grammar.py",
    "test_combinations.py",
    "test_compare.py",
    "test_compare_html.py",
    "test_compare_stats.py",
    "test_dashboards.py",
    "test_data_sources.py",
    "test_e2e_families.py",
    "test_eval_long.py",
    "test_experiments.py",
    "test_export_hf.py",
    "test_gpu_workers.py",
    "test_hf_streaming.py",
    "test_init_from_agrees.py",
    "test_nonfinite.py",
    "test_positions_footing.py",
    "test_progress_bar.py",
    "test_python_api.py",
    "test_quickstart_notebook.py",
    "test_readme_python.py",
    "test_resume.py",
    "test_run_integrity.py",
    "test_safe_loading.py",
    "test_sweep_console.py",
    "test_throughput.py",
    "test_token_cache.py",
    "test_tokenizer_sample.py",
    "test_train_e2e.py",
    "test_transfer.py",
    "test_use_run.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
