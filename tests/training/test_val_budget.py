"""Validation within a budget: a fixed sample of windows spread over a large split, the same at
every validation; a small split read whole; the exact figure on request and in xfmr-eval."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from helpers.config import compose_config
from xfmr.data.text import TextCorpusDataModule
from xfmr.errors import UserError
from xfmr.runs.evaluation_data import data_with_overrides


def _module(n_tokens: int, **settings) -> TextCorpusDataModule:
    """Windows of 4 + 1 tokens over ids 0..n_tokens-1: window i starts at token 4 * i."""
    module = TextCorpusDataModule(block_size=4, batch_size=2, **settings)
    module.val_ids = torch.arange(n_tokens)
    module.collate_fn = torch.stack
    return module


def _starts(module: TextCorpusDataModule) -> list[int]:
    return [int(block[0]) // 4 for batch in module.val_dataloader() for block in batch]


def test_a_large_split_is_sampled_evenly_and_the_same_every_time() -> None:
    module = _module(4 * 100 + 1, val_batches=3)  # 100 windows, a budget of 6
    assert _starts(module) == [0, 16, 33, 50, 66, 83]  # spread to the tail, not the head
    assert _starts(module) == _starts(module)
    assert module.val_coverage() == {"windows": 6, "of": 100, "tokens": 24}
    assert module.val_coverage(batches=2) == {"windows": 4, "of": 100, "tokens": 16}


def test_a_split_within_the_budget_or_without_one_is_read_whole() -> None:
    assert _starts(_module(4 * 5 + 1, val_batches=3)) == [0, 1, 2, 3, 4]
    assert _starts(_module(4 * 100 + 1, val_batches=None)) == list(range(100))
    with pytest.raises(UserError, match="data.val_batches=0"):
        _module(9, val_batches=0)


def test_the_progress_bar_says_how_much_a_validation_reads() -> None:
    from xfmr.training.progress_bars import StepProgressBar

    bar = StepProgressBar()
    bar._trainer = SimpleNamespace(
        datamodule=_module(4 * 100 + 1, val_batches=3), num_val_batches=[3], world_size=1
    )
    assert bar.validation_description == "Validation (6 of 100 windows, 6.0%)"
    bar._trainer.datamodule = _module(4 * 5 + 1, val_batches=3)
    assert bar.validation_description == "Validation (all 5 windows)"


def test_results_say_how_much_of_the_split_validation_read(tmp_path) -> None:
    from xfmr.training.run import run_training

    cfg = compose_config(tmp_path, ["data.val_batches=2", "trainer.limit_val_batches=1.0"])
    run_training(cfg)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    coverage = results["val_coverage"]
    assert coverage["windows"] == 8 and coverage["of"] > 8  # 2 batches of 4 windows
    assert coverage["tokens"] == 8 * 16


def test_xfmr_eval_reads_the_whole_split_unless_asked(tmp_path) -> None:
    run = compose_config(tmp_path, ["data.val_batches=200"])
    assert data_with_overrides(run, {}).get("val_batches") is None
    asked = data_with_overrides(run, {"val_batches": 5})
    assert asked.get("val_batches") == 5
