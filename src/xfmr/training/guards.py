"""Callbacks that end a run early for a reason: a loss that is no longer a number, or a search
trial that its pruner judges unpromising."""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning as L
import torch

from xfmr.errors import RunFailed

log = logging.getLogger("xfmr")


class StopOnNonFiniteLoss(L.Callback):
    """The first NaN or infinite training loss stops the run before its backward pass, so no
    optimizer step is taken with it and the checkpoints on disk stay the last good ones."""

    def __init__(self) -> None:
        # The step and loss tensor of the last step that passed; read only when one fails, so
        # a step costs one finiteness check, not a second device sync.
        self.last_finite: tuple[int, torch.Tensor] | None = None

    def on_before_backward(self, trainer: L.Trainer, pl_module, loss: torch.Tensor) -> None:
        if torch.isfinite(loss).all():
            self.last_finite = (trainer.global_step, loss.detach())
            return
        last = (
            f"the last finite loss was {float(self.last_finite[1]):.4g} at step "
            f"{self.last_finite[0]}"
            if self.last_finite
            else "no step had a finite loss"
        )
        raise RunFailed(
            f"training stopped: the loss is {float(loss)} at step {trainer.global_step} ({last}); "
            "likely causes: optim.lr too high, too short a schedule.warmup_steps, or a low "
            "precision (trainer.precision=32-true rules that out); the checkpoints in the run "
            "directory are from before it"
        )


class TrialPruning(L.Callback):
    """Reports the optimized metric of every validation to the search trial this job is, and
    stops the run when the pruner says so. Only rank 0 talks to the study; its decision is
    broadcast, so every DDP rank stops at the same step.

    Optuna's own Lightning callback (optuna-integration) raises TrialPruned inside `fit`, which
    would skip the run's last checkpoint and results, and it needs an RDB storage under DDP;
    here the run ends cleanly and writes both, with status `pruned`.
    """

    def __init__(self, trial: dict[str, Any]) -> None:
        self.settings = dict(trial)
        self.trial: Any = None
        self.pruned_at: int | None = None

    def setup(self, trainer: L.Trainer, pl_module, stage: str) -> None:
        if trainer.global_rank == 0 and self.trial is None:
            self.trial = connect(self.settings)

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        if trainer.sanity_checking or self.pruned_at is not None:
            return
        prune = False
        if trainer.global_rank == 0:
            value = trainer.callback_metrics.get(self.settings["metric"])
            if value is not None and math.isfinite(float(value)):
                self.trial.report(float(value), step=trainer.global_step)
                prune = self.trial.should_prune()
        if trainer.world_size > 1:
            prune = trainer.strategy.broadcast(prune, src=0)
        if prune:
            self.pruned_at = trainer.global_step
            trainer.should_stop = True
            log.info(
                "trial %d pruned at step %d (%s worse than the study's other trials)",
                self.settings["number"],
                trainer.global_step,
                self.settings["metric"],
            )


def connect(settings: dict[str, Any]) -> Any:
    """This job's trial in the sweep's study, with the sweep's pruner built again."""
    import optuna

    from xfmr.sweeps.search import build_pruner, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(
        study_name=settings["study_name"],
        storage=open_storage(settings["storage"]),
        pruner=build_pruner(settings.get("pruner"), settings.get("pruner_args") or {}),
    )
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(
        study._study_id, int(settings["number"])
    )
    return optuna.trial.Trial(study, trial_id)
