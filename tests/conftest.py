"""Fixtures: tiny data written by the tests and one thread for tiny tensors; and the slow marker
on the modules that train. What the tests share besides fixtures is in tests/helpers/."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.runs import CORPUS


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
