"""A run trained in process for four steps with a checkpoint at step 2, and a second run resumed
from that checkpoint: the two `last.ckpt`s, for a test to hold equal (exact resume)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from helpers.config import compose_config


def went_on_and_resumed(tmp_path: Path, overrides: list[str]) -> tuple[dict, dict, Path]:
    """(the resumed run's last.ckpt, the one that went on, the latter's run directory)."""
    from xfmr.training.run import run_training

    common = [
        *overrides,
        "trainer.max_steps=4",
        "trainer.enable_model_summary=false",
        "callbacks.text_sample=null",
        "callbacks.periodic_checkpoint.every_n_train_steps=2",
    ]
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    reference.mkdir(), resumed.mkdir()
    assert run_training(compose_config(reference, common))["status"] == "completed"
    step_2 = reference / "run" / "checkpoints" / "step-0000002.ckpt"
    assert run_training(compose_config(resumed, [*common, f"ckpt_path={step_2}"]))["step"] == 4
    ours, theirs = (
        torch.load(root / "run" / "checkpoints" / "last.ckpt", weights_only=True)
        for root in (resumed, reference)
    )
    return ours, theirs, reference / "run"


def assert_same_weights_and_optimizer_state(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for name, tensor in theirs["state_dict"].items():
        assert torch.equal(ours["state_dict"][name], tensor), name
    for index, state in theirs["optimizer_states"][0]["state"].items():
        for key, value in state.items():
            assert torch.equal(ours["optimizer_states"][0]["state"][index][key], value), index
