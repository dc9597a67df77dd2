"""The training bar counts optimizer steps toward trainer.max_steps, on real tiny runs.

Epochs are cut to 3 batches so that a run spans several of them: a per-epoch bar (Lightning's)
would show 3 as its total and restart its count, the step bar shows max_steps throughout.
"""

from __future__ import annotations

import csv
from pathlib import Path
from statistics import median_high

import pytest
from omegaconf import OmegaConf

from helpers.config import compose_config
from xfmr.paths import config_dir
from xfmr.training.progress_bars import StepProgressBar, shown_figures
from xfmr.training.run import run_training
from xfmr.training.run_summary import TRAIN_MFU, TRAIN_TOKENS_PER_S

pytestmark = pytest.mark.usefixtures("one_thread")

EPOCH_OF_3 = ["+trainer.limit_train_batches=3", "trainer.limit_val_batches=2"]


class RecordedBar(StepProgressBar):
    """The shipped bar, noting what its tasks showed as each epoch started and as training ended
    (after training the run may validate again, which starts a fresh display)."""

    last: RecordedBar | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.at_epoch_start: list[dict] = []
        self.at_train_end: dict = {}
        self.figures: dict[int, dict] = {}  # what it shows of training, after each step
        RecordedBar.last = self

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.figures[trainer.global_step] = dict(self._figures)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.at_epoch_start.append(self.shown())

    def on_train_end(self, trainer, pl_module) -> None:
        self.at_train_end = self.shown()
        super().on_train_end(trainer, pl_module)

    def shown(self) -> dict:
        train_bar = self.train_progress_bar
        return {
            "train": (train_bar.description.strip(), train_bar.total, train_bar.completed),
            "validation": [
                (task.total, task.completed)
                for task in self.progress.tasks
                if task.description.strip() == self.validation_description
            ],
        }


def _train_with_bar(tmp_path: Path, overrides: list[str]) -> tuple[dict, RecordedBar]:
    """A tiny run with the shipped progress bar settings, the bar kept for inspection."""
    shipped = OmegaConf.load(config_dir() / "callbacks" / "default.yaml").progress_bar
    assert shipped._target_ == "xfmr.training.progress_bars.StepProgressBar"
    settings = ", ".join(f"{k}: {v}" for k, v in shipped.items() if k != "_target_")
    bar = f"callbacks.progress_bar={{_target_: {__name__}.RecordedBar, {settings}}}"
    cfg = compose_config(
        tmp_path, ["trainer.enable_progress_bar=true", *EPOCH_OF_3, *overrides, bar]
    )
    RecordedBar.last = None
    results = run_training(cfg)
    assert RecordedBar.last is not None, "the configured bar was not used"
    return results, RecordedBar.last


def test_bar_counts_steps_to_max_steps_and_resumes_at_the_restored_step(tmp_path: Path) -> None:
    results, bar = _train_with_bar(tmp_path, ["trainer.max_steps=5"])
    assert results["step"] == 5
    assert bar.at_epoch_start[0]["train"] == ("step", 5, 0)
    assert bar.at_train_end["train"] == ("step", 5, 5), "one bar across both epochs"
    # Validated at steps 2 and 4, each bar through both of its batches.
    assert bar.at_train_end["validation"] == [(2, 2), (2, 2)]

    results, bar = _train_with_bar(tmp_path, ["trainer.max_steps=7"])  # same run directory
    assert results["resumed_from"], "the second run must resume the first"
    assert results["step"] == 7
    assert bar.at_epoch_start[0]["train"] == ("step", 7, 5)
    assert bar.at_train_end["train"] == ("step", 7, 7)


def test_without_max_steps_the_bar_counts_batches_per_epoch(tmp_path: Path) -> None:
    results, bar = _train_with_bar(tmp_path, ["trainer.max_steps=-1", "trainer.max_epochs=2"])
    assert results["step"] == 6
    assert [shown["train"] for shown in bar.at_epoch_start] == [
        ("Epoch 0/1", 3, 0),
        ("Epoch 1/1", 3, 0),
    ]
    assert bar.at_train_end["train"] == ("Epoch 1/1", 3, 3)


def test_the_bar_shows_loss_tokens_per_second_and_mfu_read_at_logging_steps(tmp_path: Path) -> None:
    results, bar = _train_with_bar(
        tmp_path,
        ["trainer.max_steps=12", "trainer.log_every_n_steps=5", "callbacks.text_sample=null"],
    )
    changed = [s for s in sorted(bar.figures) if bar.figures[s] != bar.figures.get(s - 1, {})]
    assert changed == [5, 10, 12]  # read at logging steps (and the last), not in between
    shown = bar.figures[12]
    assert set(shown) == {"train/loss", TRAIN_TOKENS_PER_S, TRAIN_MFU}, shown
    assert float(shown["train/loss"]) == pytest.approx(results["metrics"]["train/loss"], rel=1e-3)
    assert shown[TRAIN_MFU].endswith("%") and 0 < float(shown[TRAIN_MFU][:-1]) < 100, shown
    metrics = bar.get_metrics(bar._trainer, None)
    assert {"train/loss", TRAIN_TOKENS_PER_S, TRAIN_MFU, "val/loss"} <= set(metrics), metrics


SPEEDS = {"train_tokens_per_s", "train_mfu", "wall_tokens_per_s", "wall_mfu"}


def test_results_state_each_throughput_figure_once_as_the_bar_and_the_log_show_it(
    tmp_path: Path,
) -> None:
    """Validating every second step, each at a logging step: every timed window (one step
    each) is logged, so results.json's train figures are the median logged window's."""
    results, bar = _train_with_bar(
        tmp_path,
        [
            "trainer.max_steps=12",
            "trainer.log_every_n_steps=2",
            "callbacks.text_sample=null",
            "logger=csv",
        ],
    )
    named = {k for k in results if k.endswith("tokens_per_s") or k.endswith("mfu")}
    assert named == SPEEDS, named
    assert not [k for k in results["metrics"] if "tok" in k or "mfu" in k], results["metrics"]
    with (tmp_path / "run" / "csv" / "metrics.csv").open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row.get(TRAIN_TOKENS_PER_S)]
    assert [int(row["step"]) + 1 for row in rows] == [2, 4, 6, 8, 10, 12]
    tokens_per_s = [float(row[TRAIN_TOKENS_PER_S]) for row in rows]
    utilisation = [float(row[TRAIN_MFU]) for row in rows]
    # ms_per_step is the median step's (the lower of two middle ones), so the higher tokens/s.
    assert results["train_tokens_per_s"] == pytest.approx(median_high(tokens_per_s), abs=0.05)
    assert results["train_mfu"] == pytest.approx(median_high(utilisation), rel=5e-4)  # 4 figures
    last = {TRAIN_TOKENS_PER_S: tokens_per_s[-1], TRAIN_MFU: utilisation[-1]}
    assert {k: bar.figures[12][k] for k in last} == shown_figures(last)  # the bar's, at the end
    # Over training's wall time: more than the seconds spent training (the history's, which
    # leave out the six validations and their checkpoints), less than the whole run's.
    tokens = results["step"] * results["tokens_per_step"]
    training_seconds = results["history"][-1]["time_s"]
    assert tokens / results["wall_time_s"] < results["wall_tokens_per_s"]
    assert results["wall_tokens_per_s"] < tokens / training_seconds
    per_token, peak = results["flops_per_token"], results["peak_flops"]
    expected = results["wall_tokens_per_s"] * per_token / peak
    assert results["wall_mfu"] == pytest.approx(expected, rel=1e-3)
