"""What ends a run early for a reason: a loss or gradient that is no longer a number, or a search
trial that its pruner judges unpromising; and what to say when a run runs out of memory."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

    - `verdict` reduces the step's loss and its gradients' total norm (the norm clipping
      scales by, `gradient_norms`, computed once for both) to one flag on the device, and
      writes the flag, the loss and each gradient's norm into the window's row for the step
      (`StepWindow`): five small kernels, no read.
    - The flag reaches the update on the device too: a fused optimizer takes it as its
      `found_inf`, the tensor torch's GradScaler gives it to skip an fp16 step, and where it is
      set the fused kernel leaves the weights, the moments and the step count as they were
      (fp16's own scaler skips a step whose gradients are not finite, as a non-finite loss
      makes them). The training step (`XfmrModule`) hands it over.
    - `settle` reads the window where reading costs no step: at logging steps, before a
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
        self.last_finite: tuple[int, float] | None = None  # (step, loss) of the last good step
        self._window: StepWindow | None = None
        self._found_before: list[int] = []

    def verdict(
        self,
        step: int,
        loss: torch.Tensor | None,
        norms: GradientNorms | None,
        agree: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """A flag on the device, 1.0 where this step must not be taken (its loss or a gradient
        is not finite here, or on another rank), else 0.0; written to the window for `settle`.

        `norms`: the gradients to check (none under fp16's loss scaler, which checks them
        itself). Their total norm is finite exactly when every gradient is, but for one that
        overflows, which clipping could not scale either. `agree` sums a flag over the ranks."""
        if loss is None and norms is None:
            return torch.zeros(())
        parts = [t for t in (loss, norms.total if norms else None) if t is not None]
        value = parts[0].detach().float() if len(parts) == 1 else parts[0].detach() + parts[1]
        bad = (~torch.isfinite(value)).float()  # float32: what a fused optimizer's found_inf is
        if agree is not None:
            bad = (agree(bad) > 0).float()
        if self._window is not None and not self._window.takes(step, norms):
            # What the window holds is read before it goes (never so on plain steps); the
            # next settle reports what this one found.
            self._found_before += self.settle()
        if self._window is None or not self._window.takes(step, norms):
            self._window = StepWindow(value, norms)
        self._window.write(step, loss, norms, bad)
        return bad

    def settle(self) -> list[int]:
        """Read the window (one read of the device): the steps found bad since the last
        settle, each logged as skipped; RunFailed for the one past `max_skips`."""
        window, self._window = self._window, None
        found, self._found_before = self._found_before, []
        for step, loss, problem in window.read() if window is not None else ():
            if problem is None:
                self.last_finite = (step, loss)
                continue
            if len(self.skipped) >= self.max_skips:
                raise RunFailed(self.failure(problem))
            self.skipped.append(step)
            found.append(step)
            log.warning(
                "step %d skipped, no update: %s (%d of nonfinite.max_skips=%d)",
                step,
                problem,
                len(self.skipped),
                self.max_skips,
            )
        if window is not None:  # the next window goes on in the same buffers
            self._window = window.emptied()
        return found

    def failure(self, problem: str) -> str:
        last = (
            f"the last finite loss was {self.last_finite[1]:.4g} at step {self.last_finite[0]}"
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


@dataclass
class GradientNorms:
    """The gradients of one step and their 2-norms, computed once (`gradient_norms`) for the
    guard, which reads their total and, at a bad step, each; and for clipping, which scales by
    the total as `torch.nn.utils.clip_grad_norm_` computes it."""

    names: tuple[str, ...]
    params: list[torch.nn.Parameter]
    each: torch.Tensor  # (P,)
    total: torch.Tensor  # ()


def gradient_norms(params: list[tuple[str, torch.nn.Parameter]]) -> GradientNorms | None:
    """The norms of the gradients `params` have (one foreach kernel); None if none has one.

    Sharded gradients (trainer=fsdp: DTensors, each rank holding a slice) are measured whole,
    over every rank's slice, so that every rank clips by, and judges, the same global norm
    that one process holding the whole gradients would."""
    named = [(name, p) for name, p in params if p.grad is not None]
    if not named:
        return None
    grads = [p.grad for _, p in named]
    each = _sharded_norms(grads) if _is_dtensor(grads[0]) else None
    if each is None:
        each = torch.stack(torch._foreach_norm(grads, 2.0))
    total = torch.linalg.vector_norm(each, 2.0)
    return GradientNorms(tuple(n for n, _ in named), [p for _, p in named], each, total)


def _is_dtensor(tensor: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def _sharded_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """(P,) global 2-norms of DTensor gradients: each rank's slices' squared norms, summed over
    the ranks in one all-reduce (FSDP2 shards every gradient on dim 0 of one mesh, so each
    element is on exactly one rank). Any other layout takes torch's own reduction per tensor."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard

    meshes = {g.device_mesh for g in grads if isinstance(g, DTensor)}
    sharded = all(
        isinstance(g, DTensor) and all(isinstance(p, Shard) for p in g.placements) for g in grads
    )
    if len(meshes) != 1 or not sharded:
        return torch.stack([n.full_tensor() for n in torch._foreach_norm(grads, 2.0)])
    (mesh,) = meshes
    local = torch.stack(torch._foreach_norm([g.to_local() for g in grads], 2.0))
    squares = local.float().square()
    dist.all_reduce(squares, group=mesh.get_group())
    return squares.sqrt()


class StepWindow:
    """The verdicts of consecutive steps since the last settle, on the device: a row per step
    (slot `step - first`) of its flag, its loss and each gradient's norm, written by one
    kernel. Grows on the device where a window outlasts its slots."""

    def __init__(self, like: torch.Tensor, norms: GradientNorms | None) -> None:
        self.first: int | None = None
        self.used = 0
        self.names = norms.names if norms is not None else ()
        self.rows = torch.zeros(64, 2 + len(self.names), device=like.device)  # float32

    def takes(self, step: int, norms: GradientNorms | None) -> bool:
        """Whether `step` is the window's next and its gradients those it keeps norms of."""
        names = norms.names if norms is not None else ()
        return names == self.names and (self.first is None or step == self.first + self.used)

    def write(
        self,
        step: int,
        loss: torch.Tensor | None,
        norms: GradientNorms | None,
        bad: torch.Tensor,
    ) -> None:
        self.first = step if self.first is None else self.first
        slot = step - self.first
        if slot >= len(self.rows):
            self.rows = torch.cat([self.rows, torch.zeros_like(self.rows)])
        parts = [bad.reshape(1), (loss.detach() if loss is not None else bad).reshape(1).float()]
        torch.cat(
            [*parts, *([norms.each.float()] if norms is not None else [])], out=self.rows[slot]
        )
        self.used = slot + 1

    def read(self) -> list[tuple[int, float, str | None]]:
        """(step, loss, what was not finite or None) of each step written: one read."""
        if not self.used:
            return []
        found = []
        for slot, (flag, loss, *norms) in enumerate(self.rows[: self.used].tolist()):
            step = self.first + slot
            found.append((step, loss, describe(step, loss, self.names, norms) if flag else None))
        return found

    def emptied(self) -> StepWindow:
        """This window's buffers, for the steps after the ones read."""
        self.first = None if self.first is None else self.first + self.used
        self.used = 0
        return self


def describe(step: int, loss: float, names: tuple[str, ...], norms: list[float]) -> str:
    """What was not finite at a bad step: the loss, else the first parameter whose gradient's
    norm was not."""
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


def out_of_memory(error: BaseException, data: Any, precision: str) -> str | None:
    """The reason to report if `error` is the device or the host running out of memory (None
    if it is not): which settings to lower, with their values in this run (`data`: its data
    section; `precision`: trainer.precision)."""
    if not isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        message = str(error).lower()
        if not isinstance(error, RuntimeError) or not any(s in message for s in _OUT_OF_MEMORY):
            return None
    length_key = next((k for k in ("block_size", "max_length") if k in data.settings), None)
    length = f"data.{length_key}={data.get(length_key)}, " if length_key else ""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return (
        f"out of memory during training ({first_line[:160]}): lower data.batch_size="
        f"{data.get('batch_size')} (trainer.accumulate_grad_batches keeps the effective batch), "
        f"{length}or trainer.precision={precision} (e.g. bf16-mixed); the "
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

    from xfmr.sweeps.search import build_pruner
    from xfmr.sweeps.study import study_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = study_storage(settings["storage"])
    study = optuna.load_study(
        study_name=settings["study_name"],
        storage=storage,
        pruner=build_pruner(settings.get("pruner"), settings.get("pruner_args") or {}),
    )
    study_id = storage.get_study_id_from_name(settings["study_name"])
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, int(settings["number"]))
    return optuna.trial.Trial(study, trial_id)


# torch's optimizers whose fused step takes a `found_inf` flag: the contract its GradScaler relies
# on (torch/optim: Adam and AdamW, SGD and Adagrad with fused=True).
FOUND_INF_OPTIMIZERS = (torch.optim.Adam, torch.optim.SGD, torch.optim.Adagrad)


def takes_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` leaves a step out on the device when given a `found_inf` flag: torch's
    fused Adam, AdamW, SGD and Adagrad do; the per-tensor and foreach loops do not."""
    if not isinstance(optimizer, FOUND_INF_OPTIMIZERS):
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


@contextmanager
def update_left_out(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """The torch optimizer's `step` makes no update while this lasts: it runs the closure it is
    given (the hooks Lightning runs inside a step) and leaves the weights and its state as
    they were. Its `step` is replaced on the instance, and put back as it was there (torch's LR
    schedulers wrap it on the instance, to note that the optimizer has stepped)."""
    own = vars(optimizer).get("step")
    optimizer.step = _closure_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        if own is None:
            del optimizer.step
        else:
            optimizer.step = own  # type: ignore[method-assign]


def _closure_only(closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
    return closure() if closure is not None else None
