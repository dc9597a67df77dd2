"""`callbacks.lm_eval` (xfmr.evaluation.in_training.LmEval): off by default; on, it scores lm-eval
tasks on the model being trained every N optimizer steps and after the last, into every logger as
eval/<task>/<metric>, results.json's history and metrics, where a sweep's optimized_metric and its
pruner find them; a run with it takes the same steps as one without; and on the toy language a
trained model scores the minimal pairs well above an untrained one."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.config import compose_config

pytestmark = pytest.mark.usefixtures("one_thread")
METRIC = "eval/xfmr_minimal_pairs/acc"
# A tiny decoder on a small slice of the toy language (data=synthetic).
TOY = [
    "data=synthetic",
    "size=tiny",
    "data.n_sentences=2000",
    "data.val_batches=1",
    "callbacks.text_sample=null",
    "trainer.enable_model_summary=false",
    "print_config=false",
]


def _train(tmp_path: Path, overrides: list[str], *, extra_callbacks=()) -> dict:
    from xfmr.training import fitting as fit
    from xfmr.training.run import run_training

    tmp_path.mkdir(parents=True, exist_ok=True)
    config = compose_config(tmp_path, [*TOY, *overrides])
    fitting = fit._fitting
    fit._fitting = lambda *args: [*fitting(*args), *extra_callbacks]
    try:
        return run_training(config)
    finally:
        fit._fitting = fitting


def _scoring(tasks: str, *, every: int, limit: int) -> list[str]:
    return [
        f"callbacks.lm_eval.tasks={tasks}",
        f"callbacks.lm_eval.every_n_steps={every}",
        f"callbacks.lm_eval.limit={limit}",
    ]


def test_it_is_off_by_default_and_its_keys_are_checked(tmp_path) -> None:
    from xfmr.errors import UserError

    config = compose_config(tmp_path, ["size=tiny"])
    (scoring,) = [c for c in config.callbacks.build() if type(c).__name__ == "LmEval"]
    assert scoring.names == []
    assert not scoring.is_due(SimpleNamespace(global_step=200, max_steps=200))
    with pytest.raises(UserError, match="callbacks.lm_eval.every_n_steps=0 is not valid"):
        compose_config(tmp_path, ["callbacks.lm_eval.every_n_steps=0"])
    with pytest.raises(UserError, match="callbacks.lm_eval.limt is not a callbacks.lm_eval key"):
        compose_config(tmp_path, ["+callbacks.lm_eval.limt=5"])


class SeenAtValidation:
    """What TrialPruning reports at each validation: the optimized metric's value there, read
    from `trainer.callback_metrics` (a trial stand-in, so no study is needed)."""

    def __init__(self) -> None:
        self.reported: list[tuple[float, int]] = []

    def report(self, value: float, step: int) -> None:
        self.reported.append((value, step))

    def should_prune(self) -> bool:
        return False


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """Six steps validated every third, scored every fourth and after the last (steps 4 and
    6), a CSV logger, optimized_metric on a downstream score, and TrialPruning watching it."""
    from xfmr.training.guards import TrialPruning

    root = tmp_path_factory.mktemp("scored")
    pruning = TrialPruning({"metric": METRIC, "number": 0})
    pruning.trial = SeenAtValidation()
    overrides = [
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "logger=csv",
        f"optimized_metric={METRIC}",
        *_scoring("xfmr_minimal_pairs", every=4, limit=8),
    ]
    results = _train(root, overrides, extra_callbacks=[pruning])
    return root / "run", results, pruning.trial.reported


def test_scores_go_to_the_history_the_loggers_and_the_metrics(scored) -> None:
    run_dir, results, _ = scored
    history = {row["step"]: row for row in results["history"]}
    assert sorted(history) == [3, 4, 6]
    assert METRIC not in history[3] and "val/loss" in history[3]
    assert "val/loss" not in history[4]  # scored between validations: a row of its own
    assert {METRIC, f"{METRIC[: -len('/acc')]}/acc_centred", "val/loss"} <= set(history[6])
    assert history[4]["tokens"] < history[6]["tokens"] and history[4]["time_s"] > 0
    for row in (history[4], history[6]):
        assert 0 <= row[METRIC] <= 1
        assert row[f"{METRIC}_centred"] == pytest.approx((row[METRIC] - 0.5) / 0.5)
        assert "eval/xfmr_minimal_pairs_a_an/acc" in row  # each task of the group too
    assert results["metrics"][METRIC] == history[6][METRIC]
    with (run_dir / "csv" / "metrics.csv").open() as f:
        logged = [row for row in csv.DictReader(f) if row.get(METRIC)]
    assert [float(row[METRIC]) for row in logged] == [history[4][METRIC], history[6][METRIC]]
    assert json.loads((run_dir / "results.json").read_text())["history"] == results["history"]


def test_a_sweep_finds_the_optimized_metric_and_its_pruner_sees_it(scored) -> None:
    from xfmr.sweeps.jobs import outcome_of

    run_dir, results, reported = scored
    outcome = outcome_of(0, [], run_dir, METRIC, None)
    assert outcome.status == "completed" and outcome.value == results["metrics"][METRIC]
    # Validation at step 3 comes before the first score; at step 6, after the step's scoring.
    assert reported == [(pytest.approx(results["history"][-1][METRIC]), 6)]


def test_under_ddp_rank_zero_scores_and_the_run_ends(tmp_path) -> None:
    """DDP: rank 0 scores while the other process waits at the next gradient reduction; the run
    does not hang, and rank 0's scores reach results.json at each step due. Two CPU processes
    through the CLI. (FSDP, where every rank scores: tests/training/test_fsdp.py's shared run.)"""
    from helpers.cli import run_cli

    run_dir = tmp_path / "run"
    args = [*TOY, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
    args += ["trainer.max_steps=4", "trainer.val_check_interval=4", f"hydra.run.dir={run_dir}"]
    result = run_cli([*args, *_scoring("xfmr_minimal_pairs", every=2, limit=8)], tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert (results["status"], results["world_size"]) == ("completed", 2)
    assert [row["step"] for row in results["history"]] == [2, 4]
    assert all(0 <= row[METRIC] <= 1 for row in results["history"])
    assert "lm_eval after step 4" in result.output


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    return state["state_dict"]


def test_scoring_leaves_the_training_trajectory_as_it_was(tmp_path) -> None:
    """With dropout on, a scoring that left the model in eval mode would change every later
    step. (Each step seeds its dropout from its batch's key, `xfmr.data.order.seed_step`; the
    generators lm-eval seeds are put back for data that gives no key: the test below.)"""
    common = ["trainer.max_steps=5", "trainer.val_check_interval=5", "model.dropout=0.1"]
    _train(tmp_path / "plain", common)
    _train(tmp_path / "scored", [*common, *_scoring("xfmr_minimal_pairs", every=2, limit=4)])
    plain, scored = _weights(tmp_path / "plain" / "run"), _weights(tmp_path / "scored" / "run")
    assert plain.keys() == scored.keys()
    assert all(torch.equal(plain[k], scored[k]) for k in plain)


def test_scoring_puts_back_each_modules_mode_and_the_random_generators() -> None:
    import random

    import numpy as np

    from xfmr.evaluation.in_training import training_untouched

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    model[0].eval()  # a frozen part stays as it was
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    with training_untouched(model):
        assert not any(module.training for module in model.modules())
        torch.manual_seed(1234), random.seed(0), np.random.seed(1234)  # as lm-eval seeds
        assert torch.is_grad_enabled() is False
    assert [m.training for m in model.modules()] == [True, False, True]
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    assert (np.random.get_state()[1] == before[2]).all()


# The rule a small decoder learns first: the verb agrees with its subject. An untrained model
# scores below chance on it, since it finds the shorter sentence likelier and the corrupted verb
# is often the shorter (docs/evaluation-tasks.md).
AGREEMENT = "eval/xfmr_minimal_pairs_agreement/acc"
LEARNED = 0.7


@pytest.fixture(scope="module")
def toy_scores(tmp_path_factory) -> dict[str, list[dict]]:
    """The histories of a tiny decoder trained 300 steps on the toy language (about 15 s on
    one thread), scored at steps 150 and 300, and of one left untrained (lr 0), scored after
    its one step; 100 pairs of each rule."""
    scoring = _scoring("xfmr_minimal_pairs", every=150, limit=100)
    runs = {
        "trained": ["trainer.max_steps=300", "optim.lr=3e-3", "data.batch_size=32"],
        "untrained": ["trainer.max_steps=1", "optim.lr=0"],
    }
    return {
        name: _train(
            tmp_path_factory.mktemp(name),
            [*overrides, f"trainer.val_check_interval={overrides[0].split('=')[1]}", *scoring],
        )["history"]
        for name, overrides in runs.items()
    }


def test_a_trained_model_tells_the_grammatical_sentence_and_an_untrained_one_does_not(
    toy_scores,
) -> None:
    def learned(row: dict) -> bool:
        return row[AGREEMENT] >= LEARNED and row[METRIC] > 0.5

    trained, untrained = toy_scores["trained"][-1], toy_scores["untrained"][-1]
    assert learned(trained), trained
    assert not learned(untrained), untrained
    assert trained[AGREEMENT] - untrained[AGREEMENT] >= 0.3
    assert untrained[METRIC] == pytest.approx(0.5, abs=0.1)  # near chance
    assert toy_scores["trained"][0][AGREEMENT] <= trained[AGREEMENT]  # it grows with training
