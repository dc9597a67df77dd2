"""Fixtures: tiny data written by the tests, one thread for tiny tensors and a tiny run trained
once for the tests that only read one; and the slow marker on the modules that train. What the
tests share besides fixtures is in tests/helpers/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from helpers import TESTS_DIR
from helpers.cli import run_cli
from helpers.runs import CORPUS, FSDP, TINY, TinyRun

# The suite's workers (pytest-xdist, one per core) share the cores: one thread each, in this
# process and in every process it starts (a CLI, a DDP rank, a sweep's job), rather than each
# running torch's pool of one thread per core over the others'. Set before the first process
# starts (helpers.cli_processes' fork server reads it once); a person's own setting wins.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """TINY on CORPUS, trained by the real `xfmr-train` once per process (each xdist worker has
    its own) for every test that only reads a finished run. Nothing writes into it: a test that
    resumes or evaluates a run works on `tiny_run.copy(tmp_path / "run")`."""
    root = tmp_path_factory.mktemp("tiny_run")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    args = (*TINY, "data=text", f"data.path={corpus}")
    run_dir = root / "run"
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], root)
    assert result.returncode == 0, result.output
    return TinyRun(run_dir, args)


@pytest.fixture(scope="session")
def fsdp_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    """TINY on CORPUS under trainer=fsdp on two CPU processes, trained once per process for the
    tests that read a sharded run (tests/training/test_fsdp.py): a periodic checkpoint every 2
    steps, so step-2 and step-4 are folders beside best and last; activation checkpointing on; a
    short closing text sample, which every rank runs; lm-eval's minimal pairs scored at steps 2
    and 4 (`callbacks.lm_eval`), which every rank of a sharded model scores together."""
    root = tmp_path_factory.mktemp("fsdp_run")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    args = (
        *TINY,
        *FSDP,
        "data=text",
        f"data.path={corpus}",
        "callbacks.periodic_checkpoint.every_n_train_steps=2",
        "callbacks.text_sample.max_new_tokens=8",
        "model.activation_checkpointing=true",  # each sharded block recomputed in backward
        "callbacks.lm_eval.tasks=xfmr_minimal_pairs",
        "callbacks.lm_eval.every_n_steps=2",
        "callbacks.lm_eval.limit=8",
    )
    run_dir = root / "run"
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], root)
    assert result.returncode == 0, result.output
    return TinyRun(run_dir, args)


# Modules whose tests train, start processes or compose every combination (most of the suite's
# time), by their path in tests/: `make test-fast` (-m "not slow") leaves them out for a loop of
# under a minute while editing; `make test` and CI run them.
SLOW_MODULES = {
    "api/test_python_api.py",
    "cli/test_bad_input.py",
    "cli/test_check.py",
    "cli/test_cli_errors.py",
    "cli/test_cli_grammar.py",
    "conf/test_combinations.py",
    "config/test_earlier_runs.py",
    "conf/test_experiments.py",
    "data/test_data_sources.py",
    "data/test_hf_streaming.py",
    "docs/test_adding_an_objective.py",
    "docs/test_python_blocks.py",
    "docs/test_quickstart_notebook.py",
    "docs/test_site.py",
    "e2e/test_activation_memory.py",
    "e2e/test_e2e_families.py",
    "e2e/test_train_e2e.py",
    "interop/test_export_hf.py",
    "nn/test_positions_footing.py",
    "objectives/test_bert_pretraining.py",
    "runs/test_compare.py",
    "runs/test_compare_html.py",
    "runs/test_compare_points.py",
    "runs/test_compare_stats.py",
    "runs/test_compare_views.py",
    "runs/test_eval_long.py",
    "runs/test_file_modes.py",
    "runs/test_safe_loading.py",
    "runs/test_use_run.py",
    "sweeps/test_dashboards.py",
    "sweeps/test_gpu_workers.py",
    "sweeps/test_shared_stores.py",
    "sweeps/test_submitit_requeue.py",
    "sweeps/test_sweep_console.py",
    "text/test_token_cache.py",
    "text/test_tokenizer_sample.py",
    "training/test_init_from_agrees.py",
    "training/test_disk_full.py",
    "training/test_fsdp.py",
    "training/test_many_nodes.py",
    "training/test_nonfinite.py",
    "training/test_progress_bar.py",
    "training/test_resume.py",
    "training/test_run_integrity.py",
    "training/test_slurm_requeue.py",
    "training/test_throughput.py",
    "training/test_transfer.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    moved = sorted(name for name in SLOW_MODULES if not (TESTS_DIR / name).is_file())
    if moved:  # a module moved or renamed would silently join the fast loop
        raise pytest.UsageError(f"SLOW_MODULES in tests/conftest.py names no file: {moved}")
    for item in items:
        if item.path.resolve().relative_to(TESTS_DIR).as_posix() in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
