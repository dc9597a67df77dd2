"""`trainer.precision=auto`, the default: the precision the device trains in best, chosen where
the device is known and written to results.json; on a CPU, 32-true, so every CPU figure is what
it was. An impossible request is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import xfmr.devices
from helpers.config import compose_config
from xfmr.config.trainer import TrainerConfig, device_precision
from xfmr.errors import UserError

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _gpu(monkeypatch: pytest.MonkeyPatch, *, bf16: bool) -> None:
    """A machine with a CUDA GPU, bfloat16 or not, as the checks see it."""
    monkeypatch.setattr(xfmr.devices, "cuda_driver_loaded", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Tesla T4")


def _trainer(**settings) -> TrainerConfig:
    return TrainerConfig.read({"_target_": "lightning.pytorch.Trainer", **settings})


@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_auto_is_32_true_on_a_cpu(accelerator: str) -> None:
    if accelerator == "auto" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    trainer = _trainer(accelerator=accelerator, precision="auto")
    assert trainer.resolved().precision == "32-true" and trainer.precision == "auto"


@pytest.mark.parametrize(("bf16", "chosen"), [(True, "bf16-mixed"), (False, "16-mixed")])
@pytest.mark.parametrize("accelerator", ["gpu", "cuda", "auto"])
def test_auto_on_a_gpu_is_bf16_where_it_has_bfloat16_else_fp16_with_loss_scaling(
    monkeypatch: pytest.MonkeyPatch, accelerator: str, bf16: bool, chosen: str
) -> None:
    _gpu(monkeypatch, bf16=bf16)
    assert device_precision(accelerator) == chosen
    assert device_precision("cpu") == "32-true"  # a GPU machine's CPU run stays float32


def test_a_precision_given_is_kept() -> None:
    trainer = _trainer(accelerator="cpu", precision="bf16-mixed")
    assert trainer.resolved().precision == "bf16-mixed"


def test_bf16_on_a_gpu_without_it_is_refused_naming_fp16(monkeypatch) -> None:
    _gpu(monkeypatch, bf16=False)
    with pytest.raises(UserError) as refused:
        _trainer(accelerator="gpu", precision="bf16-mixed").resolved()
    message = str(refused.value)
    assert "trainer.precision=bf16-mixed" in message and "16-mixed" in message
    assert "Tesla T4" in message and "\n" not in message


def test_an_unknown_precision_is_refused_naming_auto() -> None:
    with pytest.raises(UserError, match="'auto', '32-true', 'bf16-mixed'"):
        _trainer(accelerator="cpu", precision="fp8")


def _history(tmp_path: Path, *overrides: str) -> tuple[str, list[dict]]:
    from helpers.runs import read_results
    from xfmr.training.run import run_training

    tmp_path.mkdir(exist_ok=True)
    cfg = compose_config(tmp_path, ["size=tiny", "trainer.accelerator=cpu", *overrides])
    run_training(cfg)
    results = read_results(Path(cfg.paths.output_dir))
    return results["precision"], [
        {k: v for k, v in row.items() if k != "time_s"} for row in results["history"]
    ]


def test_auto_on_a_cpu_trains_bit_for_bit_as_32_true(tmp_path: Path) -> None:
    auto = _history(tmp_path / "auto")
    explicit = _history(tmp_path / "explicit", "trainer.precision=32-true")
    assert auto[0] == explicit[0] == "32-true"  # written to results.json
    assert auto[1] == explicit[1] and auto[1]


@needs_cuda
def test_auto_on_this_gpu(tmp_path: Path) -> None:
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    assert device_precision("gpu") == expected
    precision, history = _history(tmp_path, "trainer.accelerator=gpu")
    assert precision == expected and history
