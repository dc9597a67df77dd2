"""A Lightning callback that records, for each backward of each training step, whether the
gradients were added over the processes during it: under DDP, whether its communication hook
ran (one it is given here, torch's default all-reduce, counting its calls); under FSDP2,
whether the sharded parameters received their reduced gradients (they have none until a
reduce-scatter gives them some: the optimizer step leaves them unset). A test adds it with
`+callbacks.syncs={_target_: helpers.gradient_syncs.GradientSyncs, path: DIR}` (tests/ on the
path: `helpers.helpers_env()`); each rank writes DIR/rank{R}.json when training ends."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


class GradientSyncs(L.Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.steps: list[list[bool]] = []  # per training step, per backward: synced or not
        self.strategy = ""
        self.hook_calls = 0

    def on_train_start(self, trainer, pl_module) -> None:
        model = trainer.strategy.model
        self.strategy = type(trainer.strategy).__name__
        if isinstance(model, DistributedDataParallel):

            def counted(state, bucket):
                self.hook_calls += 1
                return allreduce_hook(state, bucket)

            model.register_comm_hook(None, counted)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.steps.append([])

    def on_after_backward(self, trainer, pl_module) -> None:
        if self.strategy == "DDPStrategy":
            synced, self.hook_calls = self.hook_calls > 0, 0
        else:
            synced = any(p.grad is not None for p in pl_module.parameters())
        self.steps[-1].append(synced)

    def on_train_end(self, trainer, pl_module) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        record = {"strategy": self.strategy, "steps": self.steps}
        (self.path / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
