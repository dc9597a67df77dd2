"""The LightningModule: wires model, objective, metrics, optimizer and schedule; no model maths.

Each of Lightning's training batches is one optimizer step's window of micro-batches (the
training loader hands them out a window at a time, `xfmr.data.order.counted_windows`), and the
training step makes the whole step under Lightning's manual optimization: every micro-batch's
forward and backward, the non-finite guard's verdict, clipping, the update and the schedule.
Lightning's own counters (`global_step`, `log_every_n_steps`, `val_check_interval`,
`limit_train_batches`) then count optimizer steps.

The training loss is that of one batch holding every micro-batch of the optimizer step on every
process (`xfmr.objectives.terms`): each micro-batch's per-term sums are divided by the step's
totals of counted targets, which the training loader attaches to each batch of the window
(`xfmr.data.order.WINDOW_COUNTS`) and which are added over the processes on the device. A mean
per micro-batch, averaged by accumulation and by DDP, would weight a micro-batch of few targets
as much as one of many. An objective's auxiliary terms (PaLM's z-loss) are optimised with the
rest, and their parts of the step's loss are kept apart for the logs (`step_terms`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from xfmr.data.order import COUNTS, WINDOW_COUNTS, seed_step
from xfmr.objectives.contract import Objective
from xfmr.objectives.terms import TermLoss, Terms, auxiliary, divided, loss_sums
from xfmr.training.cadence import is_logging_step
from xfmr.training.compiling import CUDA_GRAPH_MODES, CompiledStep
from xfmr.training.earlier_checkpoints import from_automatic_optimization
from xfmr.training.guards import (
    GradientNorms,
    NonFiniteGuard,
    gradient_norms,
    skipped_where,
    takes_found_inf,
    update_left_out,
)
from xfmr.training.optim import optimizer_groups

log = logging.getLogger("xfmr")

# The Trainer's settings that the module takes over, which Lightning refuses under manual
# optimization: the Trainer gets these, the module the config's (`accumulate`,
# `gradient_clip_val`, `gradient_clip_algorithm`) and the data module the window.
TAKEN_FROM_TRAINER: dict[str, Any] = {
    "accumulate_grad_batches": 1,
    "gradient_clip_val": None,
    "gradient_clip_algorithm": None,
}


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
    accumulate: micro-batches per optimizer step (`trainer.accumulate_grad_batches`), the
        window the data module hands out; read here to resume checkpoints written before
        the window was one batch (`xfmr.training.earlier_checkpoints`).
    gradient_clip_val, gradient_clip_algorithm: clipping before each update, as Lightning's
        Trainer arguments of those names mean it (None or 0: none; "norm" or "value").
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
        accumulate: int = 1,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters({"model_config": model_config})
        self.automatic_optimization = False
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
        self.accumulate = accumulate
        self.gradient_clip_val = gradient_clip_val or 0.0
        self.gradient_clip_algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
        self._skips_on_device = False
        self._guarded: list[tuple[str, nn.Parameter]] = []
        self._step_loss: torch.Tensor | None = None  # this rank's part of the step's loss
        self._step_terms: Terms = {}  # this rank's part of each auxiliary term's
        self._sharded = False
        self._first_step_s: float | None = None  # under compile: the first step's host seconds
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

    def training_step(self, window: list[dict[str, Any]], batch_idx: int) -> None:
        """One optimizer step on `window`, its micro-batches (gradient accumulation)."""
        first = self.compile_mode is not None and self._first_step_s is None
        started = time.perf_counter() if first else 0.0
        counts = [self._counts(batch) for batch in window]
        totals = self._totals(window, counts)
        step_loss = None
        self._step_terms = {}
        for index, (batch, batch_counts) in enumerate(zip(window, counts, strict=True)):
            with self._gradient_sync(held=index < len(window) - 1):
                share = self._backward(batch, batch_counts, totals)
            step_loss = share if step_loss is None else step_loss + share
        self._step_loss = step_loss
        self._optimizer_step()
        if first:  # the host waits for the compiler, so no device read is needed to time it
            self._first_step_s = time.perf_counter() - started
            log.info(
                "compile=%s: the first step took %.1f s, its compile included",
                self.compile_mode,
                self._first_step_s,
            )

    def _backward(self, batch: dict[str, Any], counts: Terms, totals: Terms) -> torch.Tensor:
        """One micro-batch's forward and backward; its part of the step's loss, detached."""
        if self.compile_mode in CUDA_GRAPH_MODES:  # the last graph's outputs are free
            torch.compiler.cudagraph_mark_step_begin()
        seed_step(batch)  # dropout's numbers, from the micro-batch's place in the run
        loss, _ = self.training_loss(self.model, batch)
        sums = loss_sums(self.objective.name, loss, counts)
        share = divided(sums, totals)
        for term in auxiliary(sums, self.objective.loss_terms):
            part = divided({term: sums[term].detach()}, totals)
            kept = self._step_terms.get(term)
            self._step_terms[term] = part if kept is None else kept + part
        # DDP and FSDP average the gradients over the processes (torch's contract for both);
        # each process's loss is its sums over the step's totals on all of them, so the world
        # size makes that mean their sum: the gradient of the step's sum over its targets
        # divided by their count.
        scale = self.trainer.world_size
        self.manual_backward(share * scale if scale != 1 else share)
        return share.detach()

    @contextmanager
    def _gradient_sync(self, *, held: bool) -> Iterator[None]:
        """Gradients added over the processes at the window's last backward only, the earlier
        ones adding up on each process: DDP's `no_sync`, through the strategy's
        `block_backward_sync`; FSDP2's `set_requires_gradient_sync`, which that does not reach
        (Lightning's blocks a DistributedDataParallel wrapper only)."""
        if not held or self.trainer.world_size == 1:
            yield
            return
        set_sync = getattr(self.model, "set_requires_gradient_sync", None)  # an FSDP2 module
        if set_sync is None:
            with self.trainer.strategy.block_backward_sync():
                yield
            return
        set_sync(False)
        try:
            yield
        finally:
            set_sync(True)

    def _counts(self, batch: dict[str, Any]) -> Terms:
        """The batch's counts: made on the host with the batch, or else counted here."""
        counts = batch.get(COUNTS)
        return counts if counts is not None else self.objective.counts(batch)

    def _totals(self, window: list[dict[str, Any]], counts: list[Terms]) -> Terms:
        """The counts of the optimizer step on all processes: the window's totals the loader
        attached (or else its batches' counts added here), added over the ranks once per window
        (on the device: no read)."""
        totals = window[0].get(WINDOW_COUNTS)
        if totals is None:
            totals = {term: sum(c[term] for c in counts) for term in counts[0]}
        if self.trainer.world_size == 1:
            return totals  # this process's window is the step's: nothing to add or stack
        terms = tuple(totals)  # `loss_terms` and the objective's auxiliary terms
        summed = self._all_ranks(torch.stack([totals[t] for t in terms]))
        return dict(zip(terms, summed.unbind(), strict=True))

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

    def step_terms(self) -> dict[str, torch.Tensor]:
        """The last optimizer step's auxiliary terms (`xfmr.objectives.terms`), each its part of
        `step_loss` (PaLM's z-loss: its weight times the mean log(Z)^2), added over the ranks
        as `step_loss` is: logged as train/TERM at logging steps."""
        if not self._step_terms:
            return {}
        names = tuple(self._step_terms)
        summed = self._all_ranks(torch.stack([self._step_terms[t] for t in names]))
        return dict(zip(names, summed.unbind(), strict=True))

    def _optimizer_step(self) -> None:
        """The update from the window's gradients: the guard's verdict, clipping, the step of
        Lightning's optimizer (which counts `trainer.global_step`; under fp16 its precision
        plugin steps through the loss scaler) and the schedule, for the updates taken."""
        optimizer = self.optimizers()
        scaled = self._loss_scaled()
        guard = self.nonfinite_guard
        # fp16's loss scaler finds inf gradients itself; otherwise the gradients' norms serve
        # the guard and clipping both.
        measure = not scaled and (guard is not None or self.gradient_clip_val)
        norms = gradient_norms(self._guarded) if measure else None
        bad = None
        if guard is not None:
            bad = guard.verdict(
                self.trainer.global_step,
                self.step_loss(),
                norms,
                agree=self._all_ranks if self.trainer.world_size > 1 else None,
            )
        if not scaled:  # under fp16, clipped once unscaled (`on_before_optimizer_step`)
            self._clip(norms)
        taken = self._update(optimizer, bad)
        optimizer.zero_grad()
        if taken:
            for config in self.trainer.lr_scheduler_configs:
                config.scheduler.step()
        if guard is not None and self._skips_on_device and is_logging_step(self.trainer):
            self.settle_guard()

    def _update(self, optimizer: Any, bad: torch.Tensor | None) -> bool:
        """Step `optimizer`, Lightning's; False where the guard leaves the step out on the host.
        A step left out still counts toward `trainer.max_steps` (skipped steps count): Lightning
        counts a step in its optimizer's `step`, which runs with the torch optimizer's update
        left out (`update_left_out`)."""
        guard = self.nonfinite_guard
        if guard is None:
            optimizer.step()
            return True
        if not self._skips_on_device:
            taken = not guard.settle()  # read every step
            with nullcontext() if taken else update_left_out(optimizer.optimizer):
                optimizer.step()
            return taken
        # The update is left out on the device where `bad` is set; fp16's scaler leaves out a
        # step whose gradients are not finite itself.
        with skipped_where(optimizer, None if self._loss_scaled() else bad):
            optimizer.step()
        return True

    def _clip(self, norms: GradientNorms | None) -> None:
        """Clip the gradients as `gradient_clip_val` and `gradient_clip_algorithm` say: by norm
        with the guard's norms, their total as clip_grad_norm_ takes it (one pass over the
        gradients for both). Without a scaler nothing is unscaled, so a fused optimizer's
        gradients are clipped as in full precision."""
        if not self.gradient_clip_val or norms is None:
            return
        if self.gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            torch.nn.utils.clip_grad_value_(norms.params, self.gradient_clip_val)
            return
        torch.nn.utils.clip_grads_with_norm_(norms.params, self.gradient_clip_val, norms.total)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        # Under fp16, Lightning's precision plugin calls this inside the optimizer's step, once
        # the loss scaler has unscaled the gradients and before it steps.
        if self._loss_scaled() and self.gradient_clip_val:
            self.clip_gradients(
                optimizer, self.gradient_clip_val, self.gradient_clip_algorithm.value
            )

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
                "verdict is read back (one wait for the device a step); a fused AdamW "
                "(optim=adamw optim.fused=true) with one of xfmr's schedules avoids it",
                type(optimizer).__name__,
            )

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
        # Lightning calls this before it restores its loops from the same dict.
        from_automatic_optimization(checkpoint, window=self.accumulate)
        if self.nonfinite_guard is not None:
            self.nonfinite_guard.skipped = list(checkpoint.get("nonfinite_skipped", []))

    def configure_optimizers(self) -> Any:
        defaults = getattr(self.optimizer_factory, "keywords", {})
        groups = optimizer_groups(
            self.model, self.optimizer_factory, backbone_lr_scale=self.backbone_lr_scale
        )
        extra = {}
        if defaults.get("fused") and self._loss_scaled() and self.gradient_clip_val:
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
        # Stepped by the training step; the interval tells Lightning's LearningRateMonitor.
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
