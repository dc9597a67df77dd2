"""`trainer.matmul_precision`: torch's float32 matmul precision for the run, declared beside the
Trainer's keys, set while the run fits (and put back after), written to the run's config; a
value torch does not name is refused in one line; the default, highest, is torch's own, so a
CPU run is what it was. Lightning's tip to choose one is not printed: the key is the choice."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from helpers.config import compose_config
from xfmr.config.trainer import DEFAULT_MATMUL_PRECISION, MATMUL_PRECISIONS, TrainerConfig
from xfmr.errors import UserError
from xfmr.training.fitting import _DropNoise

pytestmark = pytest.mark.usefixtures("one_thread")


class MatmulProbe(L.Callback):
    """Notes torch's float32 matmul precision when the Trainer sets up and starts training."""

    seen: list[str] = []

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        MatmulProbe.seen.append(torch.get_float32_matmul_precision())

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        MatmulProbe.seen.append(torch.get_float32_matmul_precision())


def _trainer(**settings) -> TrainerConfig:
    values = {"_target_": "lightning.pytorch.Trainer", "precision": "auto", **settings}
    return TrainerConfig.read(values)


def test_the_key_is_set_while_the_run_fits_and_written_to_its_config(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    before = torch.get_float32_matmul_precision()
    assert before == "highest"  # torch's default, which another test left as it was
    MatmulProbe.seen = []
    config = compose_config(
        tmp_path,
        [
            "trainer.matmul_precision=high",
            "throughput.peak_tflops=1",  # nothing measured
            f"+callbacks.matmul_probe._target_={__name__}.MatmulProbe",
        ],
    )
    assert config.trainer.matmul_precision == "high"
    run_training(config)
    assert MatmulProbe.seen == ["high", "high"]
    assert torch.get_float32_matmul_precision() == before  # put back after the run
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["trainer"]["matmul_precision"] == "high"
    # The saved config reads back as it was (DDP workers and resumed runs read it).
    assert TrainerConfig.read(written["trainer"]).matmul_precision == "high"


def test_a_value_torch_does_not_name_is_refused_naming_the_key_and_the_choices() -> None:
    with pytest.raises(UserError) as refused:
        _trainer(accelerator="cpu", matmul_precision="tf32")
    message = str(refused.value)
    assert message.startswith("trainer.matmul_precision='tf32' is not one of")
    assert all(repr(value) in message for value in MATMUL_PRECISIONS) and "\n" not in message


def test_the_default_is_torchs_own_so_a_cpu_run_is_unchanged(tmp_path: Path) -> None:
    config = compose_config(tmp_path, [])
    assert config.trainer.matmul_precision == DEFAULT_MATMUL_PRECISION == "highest"
    assert torch.get_float32_matmul_precision() == "highest"
    # A config written before the key existed reads as the default.
    assert _trainer(accelerator="cpu").matmul_precision == "highest"
    assert _trainer(accelerator="cpu").with_settings(devices=1).matmul_precision == "highest"
    assert _trainer(matmul_precision="medium").with_settings(devices=1).matmul_precision == "medium"


def test_lightnings_tip_to_set_the_matmul_precision_is_not_printed() -> None:
    """Lightning's own wording (lightning.fabric.accelerators.cuda), given on a GPU when the
    precision is `highest`: the run's log filter drops it."""
    tip = (
        "You are using a CUDA device ('NVIDIA H200') that has Tensor Cores. To properly utilize "
        "them, you should set `torch.set_float32_matmul_precision('medium' | 'high')` which will "
        "trade-off precision for performance."
    )
    record = logging.LogRecord("lightning.fabric", logging.INFO, __file__, 1, tip, None, None)
    assert not _DropNoise().filter(record)
    other = logging.LogRecord("lightning.fabric", logging.INFO, __file__, 1, "CUDA", None, None)
    assert _DropNoise().filter(other)


@pytest.mark.parametrize(
    "line",
    [
        "`Trainer(limit_val_batches=1.0)` was configured so 100% of the batches will be used..",
        "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]",
    ],
)
def test_lightnings_lines_that_ask_nothing_of_a_person_are_not_printed(line: str) -> None:
    """Lines an H200 run printed (Lightning 2.6.6's wording) that no key of the run answers."""
    record = logging.LogRecord("lightning.pytorch", logging.INFO, __file__, 1, line, None, None)
    assert not _DropNoise().filter(record)
