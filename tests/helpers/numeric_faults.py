"""Lightning callbacks that make chosen training steps go non-finite, the way a too-high learning
rate or a low precision does, and one that records what each step changed. A test adds them with
`+callbacks.fault={_target_: helpers.numeric_faults.NanLossAt, steps: [3]}` (tests/ on the
path: `helpers.helpers_env()` for a process of its own)."""

from __future__ import annotations

import json

import lightning as L
import torch


class NanLossAt(L.Callback):
    """The training loss is NaN at each of `steps` (optimizer steps, counted from 0)."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = set(steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step not in self.steps:
            return
        compute = pl_module.training_loss

        def poisoned(model, batch):
            pl_module.training_loss = compute  # this one step only
            sums, logits = compute(model, batch)  # a sum per loss term
            return {term: value * float("nan") for term, value in sums.items()}, logits

        pl_module.training_loss = poisoned


class InfGradientAt(L.Callback):
    """One gradient element of the first parameter is inf at each of `steps`; the loss stays
    finite."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = set(steps)

    def on_after_backward(self, trainer, pl_module) -> None:
        if trainer.global_step in self.steps:
            param = next(p for p in pl_module.parameters() if p.grad is not None)
            param.grad.view(-1)[0] = float("inf")


class RecordSteps(L.Callback):
    """For each step: the weights' sum, the optimizer's step count and the lr, before and
    after it, written to `path` as JSON when training ends."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.steps: dict[int, dict] = {}

    def _state(self, trainer, pl_module) -> dict:
        optimizer = trainer.optimizers[0]
        counts = [float(s["step"]) for s in optimizer.state.values() if "step" in s]
        return {
            "weights": sum(float(p.detach().double().sum()) for p in pl_module.parameters()),
            "optimizer_steps": max(counts, default=0.0),
            "lr": optimizer.param_groups[0]["lr"],
        }

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.steps[trainer.global_step] = {"before": self._state(trainer, pl_module)}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps[trainer.global_step - 1]["after"] = self._state(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        with open(self.path, "w") as f:
            json.dump(self.steps, f)


def finite_weights(checkpoint: dict) -> bool:
    return all(
        torch.isfinite(t).all() for t in checkpoint["state_dict"].values() if t.is_floating_point()
    )
