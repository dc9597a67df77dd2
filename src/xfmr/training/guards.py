"""What ends a run early for a reason: a loss or gradient that is no longer a number, or a search
trial that its pruner judges unpromising; and what to say when a run runs out of memory."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch

from xfmr.errors import RunFailed

log = logging.getLogger("xfmr")


class NonFiniteGuard:
    """Judges every optimizer step after its backward pass and before the update: a loss or a
    gradient that is not finite (NaN, inf) skips the step (no update, no schedule step), up to
    `max_skips` times over the run; the next one stops the run with `RunFailed`, so the
    checkpoints on disk stay the last good ones.

    The loss and every gradient are reduced to one flag on the device, so a step costs one
    device sync; under DDP the ranks add their flags, so all of them skip or stop together.
    `XfmrModule.optimizer_step` calls it.
    """

    def __init__(self, max_skips: int = 0) -> None:
        self.max_skips = max_skips
        self.skipped: list[int] = []
        # The step and loss tensor of the last step that passed; read only when one fails.
        self.last_finite: tuple[int, torch.Tensor] | None = None

    def admit(
        self,
        step: int,
        loss: torch.Tensor | None,
        params: list[tuple[str, torch.nn.Parameter]],
        agree: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> bool:
        """True: take the step. False: skip it. `params`: those whose gradients to check
        (none under fp16's loss scaler, which skips steps with inf gradients itself); `agree`
        sums a count over the ranks."""
        grads = [p.grad for _, p in params if p.grad is not None]
        flags = [] if loss is None else [torch.isfinite(loss).all()]
        if grads:  # the largest |g| of each: finite exactly when every element is
            flags.append(torch.stack(torch._foreach_norm(grads, math.inf)).isfinite().all())
        if not flags:
            return True
        bad = (~torch.stack(flags).all()).float()
        if agree is not None:
            bad = agree(bad)
        if not bad.item():  # the step's one device sync
            self.last_finite = (step, loss.detach()) if loss is not None else self.last_finite
            return True
        problem = describe_non_finite(step, loss, params)
        if len(self.skipped) < self.max_skips:
            self.skipped.append(step)
            log.warning(
                "step %d skipped, no update: %s (%d of nonfinite.max_skips=%d)",
                step,
                problem,
                len(self.skipped),
                self.max_skips,
            )
            return False
        raise RunFailed(self.failure(problem))

    def failure(self, problem: str) -> str:
        last = (
            f"the last finite loss was {float(self.last_finite[1]):.4g} at step "
            f"{self.last_finite[0]}"
            if self.last_finite
            else "no step had a finite loss"
        )
        if self.max_skips:
            last += f"; skipped before: steps {self.skipped} (nonfinite.max_skips={self.max_skips})"
        return (
            f"training stopped: {problem} ({last}); likely causes: optim.lr too high, too short "
            "a schedule.warmup_steps, or a low precision (trainer.precision=32-true rules that "
            "out); the checkpoints in the run directory are from before it"
        )


def describe_non_finite(
    step: int, loss: torch.Tensor | None, params: list[tuple[str, torch.nn.Parameter]]
) -> str:
    """What was not finite at `step`: the loss, or the first parameter's gradient that was."""
    if loss is not None and not torch.isfinite(loss).all():
        return f"the loss is {float(loss)} at step {step}"
    for name, param in params:
        grad = param.grad
        if grad is not None and not torch.isfinite(grad).all():
            value = "nan" if torch.isnan(grad).any() else "inf"
            at = f", where the loss is {float(loss):.4g}" if loss is not None else ""
            return f"the gradient of {name} is {value} at step {step}{at}"
    return f"a gradient on another rank is not finite at step {step}"


# How the allocators word running out: torch.OutOfMemoryError (CUDA, "CUDA out of memory"; MPS,
# "MPS backend out of memory") and the CPU allocator's plain RuntimeError.
_OUT_OF_MEMORY = ("out of memory", "can't allocate memory")


def out_of_memory(error: BaseException, cfg: Any) -> str | None:
    """The reason to report if `error` is the device or the host running out of memory (None
    if it is not): which settings to lower, with their values in this run."""
    if not isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        message = str(error).lower()
        if not isinstance(error, RuntimeError) or not any(s in message for s in _OUT_OF_MEMORY):
            return None
    data = cfg.data
    length_key = next((k for k in ("block_size", "max_length") if k in data), None)
    length = f"data.{length_key}={data[length_key]}, " if length_key else ""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return (
        f"out of memory during training ({first_line[:160]}): lower data.batch_size="
        f"{data.get('batch_size')} (trainer.accumulate_grad_batches keeps the effective batch), "
        f"{length}or trainer.precision={cfg.trainer.get('precision')} (e.g. bf16-mixed); the "
        "checkpoints in the run directory are from before it"
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
