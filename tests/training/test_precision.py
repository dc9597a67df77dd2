"""`trainer.precision=auto`, the default: the precision the device trains in best, chosen where
the device is known and written to results.json; on a CPU, 32-true, so every CPU figure is what
it was. An impossible request is refused in one line. Under fp16's loss scaler, clipping acts on
the unscaled gradients and a step that is not finite is left out and counted."""

from __future__ import annotations

import functools
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.utils.data import DataLoader

import xfmr.devices
from helpers.config import compose_config
from xfmr.config.trainer import TrainerConfig, device_precision
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.clm import CausalLMObjective
from xfmr.training.guards import NonFiniteGuard
from xfmr.training.module import TAKEN_FROM_TRAINER, XfmrModule

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


def _fp16_step(*, clip: float, poisoned: bool = False) -> tuple[XfmrModule, L.Trainer, float]:
    """One optimizer step (SGD, lr 1: the update is minus the gradient) of a tiny decoder under
    fp16's loss scaler, on a CPU (torch's GradScaler serves CPUs too; xfmr refuses fp16 there
    only because a CPU computes it slowly): the module, its trainer and the update's norm."""
    objective = CausalLMObjective()
    torch.manual_seed(0)
    model = objective.build_model(ModelConfig(vocab_size=50, n_layers=1, n_heads=2, d_model=16))
    ids = torch.randint(0, 50, (4, 9), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    module = XfmrModule(
        model=model,
        model_config={"arch": "decoder"},
        objective=objective,
        optimizer=functools.partial(torch.optim.SGD, lr=1.0),
        nonfinite_guard=NonFiniteGuard(max_skips=1),
        gradient_clip_val=clip,
    )
    if poisoned:  # a loss that is not a number, as an fp16 overflow makes it
        forward = module.training_loss
        module.training_loss = lambda model, batch: (
            {t: v * float("nan") for t, v in forward(model, batch)[0].items()},
            None,
        )
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        **TAKEN_FROM_TRAINER,
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.fit(module, train_dataloaders=DataLoader([[batch]], batch_size=None))
    moved = [p.detach() - b for p, b in zip(model.parameters(), before, strict=True)]
    update = torch.sqrt(sum((m**2).sum() for m in moved))
    return module, trainer, float(update)


def test_fp16_clips_the_gradients_once_the_loss_scaler_has_unscaled_them() -> None:
    # Clipped while still scaled (by 4096), the update would be 4096 times smaller.
    module, trainer, update = _fp16_step(clip=1e-3)
    assert trainer.global_step == 1 and module.nonfinite_guard.skipped == []
    assert update == pytest.approx(1e-3, rel=1e-4)


def test_fp16_leaves_out_a_step_whose_loss_is_not_a_number_and_counts_it() -> None:
    module, trainer, update = _fp16_step(clip=1e-3, poisoned=True)
    assert update == 0.0, "no update"
    assert trainer.global_step == 1, "the step counts toward max_steps"
    assert module.nonfinite_guard.skipped == [0]  # read when training ends
    assert trainer.precision_plugin.scaler.get_scale() == 2.0**11  # the scaler backed off
