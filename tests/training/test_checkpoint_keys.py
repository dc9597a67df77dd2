"""The checkpoint callbacks' state keys, formatted once for speed, are the keys Lightning's own
classes give: checkpoints written before keep their callbacks' state on resume."""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint

from xfmr.training.checkpoint_saving import ModelCheckpoint
from xfmr.training.interrupts import PeriodicCheckpoint


def test_model_checkpoint_s_key_is_lightning_s() -> None:
    settings = dict(monitor="val/loss", mode="min", save_top_k=1, save_last=True)
    ours = ModelCheckpoint(**settings)
    assert ours.state_key == LightningModelCheckpoint(**settings).state_key
    assert ours.state_key.startswith("ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'")


def test_a_state_key_is_formatted_once() -> None:
    periodic = PeriodicCheckpoint(every_minutes=30, monitor="step", mode="max")
    key = periodic.state_key
    assert "PeriodicCheckpoint{" in key and "seconds=1800" in key
    periodic.monitor = "something else"  # were it formatted again, the key would follow
    assert periodic.state_key is key
