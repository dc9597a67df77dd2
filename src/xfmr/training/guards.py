"""What ends a run early for a reason: a loss or gradient that is no longer a number, or a search
trial that its pruner judges unpromising; and what to say when a run runs out of memory."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch

from xfmr.errors import RunFailed

log = logging.getLogger("xfmr")


class NonFiniteGuard:
    """Keeps a training step whose loss or gradients are not finite (NaN, inf) out of the
    weights, the optimizer's state and the schedule, up to `max_skips` times over the run; the
    next one stops the run with `RunFailed`, so the checkpoints on disk stay the last good ones.

    Nothing of this reads the device on a plain step:

    - `verdict` reduces the step's loss and every gradient's norm to one flag on the device,
      and writes the step, its loss, each gradient's norm and the last finite loss into a
      small record beside it. The norms are those gradient clipping scales by
      (`gradient_norms`), computed once for both.
    - The flag reaches the update on the device too: a fused optimizer takes it as its
      `found_inf`, the tensor torch's GradScaler gives it to skip an fp16 step, and where it is
      set the fused kernel leaves the weights, the moments and the step count as they were
      (fp16's own scaler skips a step whose gradients are not finite, as a non-finite loss
      makes them). `XfmrModule.optimizer_step` hands it over.
    - `settle` reads the record where reading costs no step: at logging steps, before a
      checkpoint is written, before validation and when training ends. Each bad step found
      there is logged and counted against `max_skips`, or stops the run naming the step, what
      was not finite and the last finite loss; the caller winds the schedule back by the steps
      found, so it counts only the updates taken. Between a skipped step and that read (under
      `trainer.log_every_n_steps` steps) the learning rate runs one step ahead per skip.

    An update that cannot be left out on the device (an optimizer without `found_inf`, a
    schedule that is not a function of its step count) settles every step instead: one read
    a step, and the step left out on the host. Under DDP the ranks add their flags, so all of
    them skip or stop together.
    """

    def __init__(self, max_skips: int = 0) -> None:
        self.max_skips = max_skips
        self.skipped: list[int] = []
        self._record: torch.Tensor | None = None  # rows: step, loss, last finite, |g| each
        self._pending: torch.Tensor | None = None  # bad steps written since the last settle
        self._last_finite: torch.Tensor | None = None  # (step, loss) of the last step that passed
        self._names: tuple[str, ...] = ()  # the parameters behind the record's |g| columns

    def verdict(
        self,
        step: int,
        loss: torch.Tensor | None,
        names: tuple[str, ...],
        norms: torch.Tensor | None,
        agree: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """A flag on the device, 1.0 where this step must not be taken (its loss or a gradient
        is not finite here, or on another rank), else 0.0; recorded for `settle`.

        `norms`: the 2-norm of each gradient to check (`gradient_norms`; none under fp16's loss
        scaler, which checks them itself), named by `names`. A norm is finite exactly when its
        gradient is, but for one whose norm overflows, which clipping could not scale either.
        `agree` sums a flag over the ranks."""
        if loss is None and norms is None:
            return torch.zeros(())
        device = loss.device if loss is not None else norms.device
        dtype = torch.float32 if device.type == "mps" else torch.float64
        loss_value = (
            loss.detach().reshape(1).to(dtype)
            if loss is not None
            else torch.zeros(1, dtype=dtype, device=device)
        )
        norms = norms.to(dtype) if norms is not None else loss_value.new_zeros(0)
        bad = (~torch.cat([loss_value, norms]).isfinite().all()).to(torch.float32)
        if agree is not None:
            bad = (agree(bad) > 0).to(torch.float32)
        self._write(step, loss_value, norms, bad, names if norms.numel() else ())
        return bad

    def _write(
        self,
        step: int,
        loss: torch.Tensor,
        largest: torch.Tensor,
        bad: torch.Tensor,
        names: tuple[str, ...],
    ) -> None:
        """Row `pending` of the record gets this step (a good step's row is overwritten by the
        next step's, as `pending` moves on only past a bad one)."""
        width = 4 + len(names)
        if self._record is None or self._record.shape[1] != width or names != self._names:
            self._allocate(width, loss)
            self._names = names
        step_loss = torch.cat([torch.full_like(loss, step), loss])
        row = torch.cat([step_loss, self._last_finite, largest])
        slot = self._pending.clamp(max=self._record.shape[0] - 1).reshape(1)
        self._record.index_copy_(0, slot, row.reshape(1, -1))
        self._pending += bad.to(torch.int64)
        self._last_finite = torch.where(bad.bool(), self._last_finite, step_loss)

    def _allocate(self, width: int, like: torch.Tensor) -> None:
        if self._pending is not None and self._record is not None:
            self.settle()  # what the old record holds is read before it goes
        rows = self.max_skips + 2  # enough to name the step past max_skips; the last is scratch
        self._record = like.new_zeros(rows, width)
        self._pending = torch.zeros((), dtype=torch.int64, device=like.device)
        if self._last_finite is None or self._last_finite.device != like.device:
            self._last_finite = torch.tensor([-1.0, math.nan], dtype=like.dtype, device=like.device)

    def settle(self) -> list[int]:
        """Read the record (one read of the device): the steps found bad since the last
        settle, each logged as skipped; RunFailed for the one past `max_skips`."""
        if self._pending is None or self._record is None:
            return []
        pending = int(self._pending)
        if not pending:
            return []
        rows = self._record[: min(pending, self._record.shape[0] - 1)].tolist()
        self._pending.zero_()
        found = []
        for row in rows:
            step, problem = int(row[0]), describe_row(row, self._names)
            if len(self.skipped) >= self.max_skips:
                raise RunFailed(self.failure(problem, last_finite=(row[2], row[3])))
            self.skipped.append(step)
            found.append(step)
            log.warning(
                "step %d skipped, no update: %s (%d of nonfinite.max_skips=%d)",
                step,
                problem,
                len(self.skipped),
                self.max_skips,
            )
        return found

    def failure(self, problem: str, *, last_finite: tuple[float, float]) -> str:
        step, loss = last_finite
        last = (
            f"the last finite loss was {loss:.4g} at step {int(step)}"
            if step >= 0
            else "no step had a finite loss"
        )
        if self.max_skips:
            last += f"; skipped before: steps {self.skipped} (nonfinite.max_skips={self.max_skips})"
        return (
            f"training stopped: {problem} ({last}); likely causes: optim.lr too high, too short "
            "a schedule.warmup_steps, or a low precision (trainer.precision=32-true rules that "
            "out); the checkpoints in the run directory are from before it"
        )


def describe_row(row: list[float], names: tuple[str, ...]) -> str:
    """What was not finite at a recorded step: the loss, or the first parameter's gradient."""
    step, loss, norms = int(row[0]), row[1], row[4:]
    if not math.isfinite(loss):
        return f"the loss is {loss} at step {step}"
    for name, value in zip(names, norms, strict=False):
        if not math.isfinite(value):
            kind = "nan" if math.isnan(value) else "inf"
            return f"the gradient of {name} is {kind} at step {step}, where the loss is {loss:.4g}"
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


def gradient_norms(
    params: list[tuple[str, torch.nn.Parameter]],
) -> tuple[tuple[str, ...], list[torch.nn.Parameter], torch.Tensor | None]:
    """The parameters that have gradients, their names, and each gradient's 2-norm stacked
    (one foreach kernel): the guard reads them for finiteness, and clipping scales by their
    total, as `torch.nn.utils.clip_grad_norm_` computes it."""
    named = [(name, p) for name, p in params if p.grad is not None]
    if not named:
        return (), [], None
    norms = torch.stack(torch._foreach_norm([p.grad for _, p in named], 2.0))
    return tuple(name for name, _ in named), [p for _, p in named], norms


def takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` leaves a step out on the device when given a `found_inf` flag: torch's
    fused Adam and AdamW do (`_step_supports_amp_scaling`, the contract GradScaler relies on);
    the per-tensor and foreach loops do not."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return False
    return all(group.get("fused") for group in optimizer.param_groups)


@contextmanager
def skipped_where(optimizer: Any, flag: torch.Tensor | None) -> Iterator[None]:
    """The optimizer's next step is left out, on the device, where `flag` (float32, 0 or 1)
    is set. Lightning hands the module a wrapper; the flag goes to the torch optimizer in it."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if flag is None:
        yield
        return
    inner.found_inf, inner.grad_scale = flag, None
    try:
        yield
    finally:
        del inner.found_inf, inner.grad_scale
