"""The LightningModule: wires model, objective, metrics, optimizer and schedule; no model maths.

The training loss is that of one batch holding every micro-batch of the optimizer step on every
process (`xfmr.objectives.terms`): each micro-batch's per-term sums are divided by the step's
totals of counted targets, which the training loader attaches to each batch of the window
(`xfmr.data.order.WINDOW_COUNTS`) and which are added over the processes on the device. A mean
per micro-batch, averaged by accumulation and by DDP, would weight a micro-batch of few targets
as much as one of many.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from xfmr.data.order import COUNTS, WINDOW_COUNTS
from xfmr.objectives.contract import Objective
from xfmr.objectives.terms import TermLoss, Terms, divided, loss_sums
from xfmr.training.cadence import is_logging_step
from xfmr.training.compiling import CompiledStep
from xfmr.training.guards import (
    GradientNorms,
    NonFiniteGuard,
    gradient_norms,
    skipped_where,
    takes_found_inf,
)
from xfmr.training.optim import param_groups

log = logging.getLogger("xfmr")


class XfmrModule(L.LightningModule):
    """Args:
    model: the model to train, as the objective builds it (`xfmr.parts.build_parts`).
    model_config: the model's config as a plain dict, saved in checkpoints.
    objective: builds the model, the loss from a batch and the validation metrics.
    optimizer: `params -> Optimizer` (Hydra `_partial_`); its `weight_decay` goes to matrices only.
    scheduler: `(optimizer, total_steps=...) -> LRScheduler` or None; stepped every optimizer step.
    backbone_lr_scale: the backbone's lr as a fraction of the optimizer's (fine-tuning).
    compile: torch.compile's mode for the training step's model and loss together (None:
        eager); see `xfmr.training.compiling`. The state dict is unchanged.
    nonfinite_guard: judges each step's loss and gradients before the update; a step it
        refuses is left out whole: no update (AdamW's moments, step count and weight decay
        stay as they were) and no schedule step (see `NonFiniteGuard`).
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        model_config: dict[str, Any],
        objective: Objective,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        backbone_lr_scale: float = 1.0,
        compile: str | None = None,
        nonfinite_guard: NonFiniteGuard | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters({"model_config": model_config})
        self.model = model
        self.objective = objective
        self.compile_mode = compile
        self.training_loss = (
            CompiledStep(objective.forward, compile) if compile else objective.forward
        )
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.backbone_lr_scale = backbone_lr_scale
        self.nonfinite_guard = nonfinite_guard
        self._last_step_taken = True
        self._skips_on_device = False
        self._guarded: list[tuple[str, nn.Parameter]] = []
        self._clip_by: GradientNorms | None = None
        self._step_totals: torch.Tensor | None = None  # the optimizer step's counts, all ranks
        self._step_loss: torch.Tensor | None = None  # this rank's part of the step's loss
        self._sharded = False
        self.val_loss = TermLoss(objective.loss_terms)
        self.val_metrics = nn.ModuleDict(objective.metrics())

    def configure_model(self) -> None:
        """Under trainer=fsdp (a device mesh from Lightning's ModelParallelStrategy), shard the
        model per transformer block (`xfmr.training.sharding`); Lightning calls this before
        each fit and validation, and the model is sharded once."""
        if self.device_mesh is None or self._sharded:
            return
        from xfmr.training.sharding import shard_blocks

        shard_blocks(
            self.model,
            self.device_mesh["data_parallel"],
            precision=str(self.trainer.precision),
            arch=self.hparams["model_config"]["arch"],
        )
        self._sharded = True

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.model(*args, **kwargs)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.compile_mode == "reduce-overhead":  # the last step's graph outputs are free
            torch.compiler.cudagraph_mark_step_begin()
        loss, _ = self.training_loss(self.model, batch)
        counts = self._counts(batch)
        sums = loss_sums(self.objective.name, loss, counts)
        first = batch_idx % self.trainer.accumulate_grad_batches == 0
        share = divided(sums, self._totals(batch, counts, renew=first))
        done = share.detach()
        self._step_loss = done if first or self._step_loss is None else self._step_loss + done
        # Lightning divides the loss by accumulate_grad_batches (also in a short last window)
        # and DDP averages gradients over the processes: both undone, the step's gradient is
        # that of the sum over the step's targets divided by their count.
        scale = self.trainer.accumulate_grad_batches * self.trainer.world_size
        return share * scale if scale != 1 else share

    def _counts(self, batch: dict[str, Any]) -> Terms:
        """The batch's counts: made on the host with the batch, or else counted here."""
        counts = batch.get(COUNTS)
        return counts if counts is not None else self.objective.counts(batch)

    def _totals(self, batch: dict[str, Any], counts: Terms, *, renew: bool) -> Terms:
        """The counts of the optimizer step on all processes: the window's totals the loader
        attached, added over the ranks once per window (on the device: no read). A loader
        that attaches none (a stream) gives each micro-batch an equal part of the step."""
        window = batch.get(WINDOW_COUNTS)
        if window is not None and self.trainer.world_size == 1:
            return window  # this process's window is the step's: nothing to add or stack
        terms = self.objective.loss_terms
        if window is None:
            totals = self._all_ranks(torch.stack([counts[t] for t in terms]))
            totals = totals * self.trainer.accumulate_grad_batches
        else:
            if renew or self._step_totals is None:
                self._step_totals = self._all_ranks(torch.stack([window[t] for t in terms]))
            totals = self._step_totals
        return dict(zip(terms, totals.unbind(), strict=True))

    def _all_ranks(self, values: torch.Tensor) -> torch.Tensor:
        """`values` added over the processes, on a copy. torch.distributed's all-reduce, not
        the strategy's `reduce`: that one puts a barrier before it, which on NCCL holds the host
        until the device has done all it was given; the all-reduce alone is queued on the
        device like any kernel."""
        if self.trainer.world_size == 1:
            return values
        summed = values.clone()
        torch.distributed.all_reduce(summed, op=torch.distributed.ReduceOp.SUM)
        return summed

    def step_loss(self) -> torch.Tensor | None:
        """The last optimizer step's training loss, that of one batch holding all of the
        step's micro-batches on every process: added over the ranks, so every rank calls it
        together (at logging steps)."""
        if self._step_loss is None:
            return None
        return self._all_ranks(self._step_loss)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        loss, logits = self.objective.forward(self.model, batch)
        counts = self._counts(batch)
        self.val_loss.update(loss_sums(self.objective.name, loss, counts), counts)
        self.objective.update_metrics(self.val_metrics, logits, batch)
        self.log("val/loss", self.val_loss, prog_bar=True)
        for name, metric in self.val_metrics.items():
            self.log(f"val/{name}", metric)

    def _loss_scaled(self) -> bool:
        """fp16 mixed precision scales the loss (a GradScaler); bf16 has float32's range and
        does not."""
        return getattr(self.trainer.precision_plugin, "scaler", None) is not None

    def on_train_start(self) -> None:
        # Checked once: which parameters' gradients the guard reads, and whether a step it
        # refuses can be left out on the device (see NonFiniteGuard).
        self._guarded = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        optimizer = self.trainer.optimizers[0]
        schedules = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        self._skips_on_device = (self._loss_scaled() or takes_found_inf(optimizer)) and all(
            isinstance(s, LambdaLR) for s in schedules
        )
        if self.nonfinite_guard is not None and not self._skips_on_device:
            log.info(
                "nonfinite guard: %s cannot leave a step out on the device, so each step's "
                "verdict is read back (one wait for the device a step); a fused optimizer "
                "(optim.fused=true) with one of xfmr's schedules avoids it",
                type(optimizer).__name__,
            )

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Lightning runs the closure (training_step, zero_grad, backward) inside
        `optimizer.step`; with a guard it runs first, so the guard sees the gradients before
        the update and the update can be left out."""
        guard = self.nonfinite_guard
        if guard is None or optimizer_closure is None:
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
            return
        result = optimizer_closure()  # runs the window's last training_step
        # The step's loss over all ranks: one more sum over them, with the guard's own.
        loss = None if result is None else self.step_loss()
        # fp16's loss scaler finds inf gradients itself and skips those steps; otherwise the
        # gradients' norms serve the guard and clipping both.
        norms = gradient_norms([] if self._loss_scaled() else self._guarded)
        self._clip_by = norms
        bad = guard.verdict(
            self.trainer.global_step,
            loss,
            norms,
            agree=self._all_ranks if self.trainer.world_size > 1 else None,
        )
        if not self._skips_on_device:
            self._last_step_taken = not guard.settle()  # read every step
            if self._last_step_taken:
                optimizer.step(closure=lambda: result)
            return
        # Clipping and the hooks before the update run inside step; the update is left out
        # on the device where `bad` is set.
        with skipped_where(optimizer, None if self._loss_scaled() else bad):
            optimizer.step(closure=lambda: result)
        if is_logging_step(self.trainer):
            self.settle_guard()

    def settle_guard(self) -> None:
        """Read the guard's record; wind the schedule back over the steps it left out."""
        if self.nonfinite_guard is None or not self._skips_on_device:
            return
        skipped = len(self.nonfinite_guard.settle())
        for config in self.trainer.lr_scheduler_configs if skipped else ():
            config.scheduler.last_epoch -= skipped + 1
            config.scheduler.step()  # sets each group's lr for the step count it now has

    def on_validation_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.settle_guard()

    def on_train_end(self) -> None:
        self.settle_guard()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.nonfinite_guard is None:
            return
        if self._skips_on_device:  # a bad step not read yet stops the run before this saves
            self.settle_guard()
            checkpoint["lr_schedulers"] = [
                config.scheduler.state_dict() for config in self.trainer.lr_scheduler_configs
            ]
        # A resumed run counts the skips made before it.
        checkpoint["nonfinite_skipped"] = list(self.nonfinite_guard.skipped)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.nonfinite_guard is not None:
            self.nonfinite_guard.skipped = list(checkpoint.get("nonfinite_skipped", []))

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """The schedule follows the updates taken: a step left out on the host does not
        advance it (one left out on the device is wound back by `settle_guard`)."""
        if self._last_step_taken:
            super().lr_scheduler_step(scheduler, metric)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        plugin = self.trainer.precision_plugin
        measured, self._clip_by = self._clip_by, None
        if isinstance(plugin, MixedPrecision) and plugin.scaler is not None:
            super().configure_gradient_clipping(
                optimizer, gradient_clip_val, gradient_clip_algorithm
            )
            return
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
        if measured is not None and gradient_clip_val and algorithm == GradClipAlgorithmType.NORM:
            # The guard's norms, their total as clip_grad_norm_ takes it: one pass over the
            # gradients for both.
            torch.nn.utils.clip_grads_with_norm_(measured.params, gradient_clip_val, measured.total)
            return
        # Without a scaler nothing is unscaled, so a fused optimizer's gradients are clipped as
        # in full precision. Lightning's mixed-precision plugin refuses any fused optimizer,
        # whatever the dtype; its base class clips without that check.
        Precision.clip_gradients(plugin, optimizer, gradient_clip_val or 0.0, algorithm)

    def configure_optimizers(self) -> Any:
        defaults = getattr(self.optimizer_factory, "keywords", {})
        scale = self.backbone_lr_scale
        groups = param_groups(
            self.model,
            weight_decay=float(defaults.get("weight_decay", 0.0)),
            backbone_lr=float(defaults["lr"]) * scale
            if scale != 1.0 and "lr" in defaults
            else None,
        )
        extra = {}
        if defaults.get("fused") and self._loss_scaled() and self.trainer.gradient_clip_val:
            # Lightning cannot clip gradients that a fused optimizer unscales internally (fp16).
            extra["fused"] = False
        optimizer = self.optimizer_factory(groups, **extra)
        if self.scheduler_factory is None:
            return optimizer
        total = (
            self.trainer.max_steps
            if self.trainer.max_steps > 0
            else int(self.trainer.estimated_stepping_batches)
        )
        scheduler = self.scheduler_factory(optimizer, total_steps=total)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
