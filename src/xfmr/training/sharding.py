"""Fully sharded data parallel (trainer=fsdp): torch's FSDP2 (`fully_shard`) per transformer
block, under Lightning's `ModelParallelStrategy`.

Why FSDP2 and not Lightning's `FSDPStrategy` (FSDP1's `FullyShardedDataParallel`): FSDP2 is the
one the torch team develops and recommends now (FSDP1 is kept for compatibility); its parameters
are DTensors, so a parameter keeps its name and shape and the optimizer sees them as they are;
its sharded checkpoints are torch.distributed.checkpoint folders that any world size reads; and
it runs on CPU processes with gloo, where FSDP1 refuses ("FSDP needs a non-CPU accelerator
device"), so the whole path is tested without a GPU.

Each rank holds 1/N of every block's parameters, gradients and optimizer state; a block's
parameters are all-gathered just before its forward and backward and freed after, and its
gradients are reduce-scattered. Checkpoints are folders: each rank writes its own shard
(`torch.distributed.checkpoint`) and rank 0 the loop's state beside them; `xfmr.run_dir.checkpoints`
reads one whole, for the entry points that use a run.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from xfmr.errors import UserError
from xfmr.nn.layers import Block
from xfmr.run_dir.checkpoints import TIED_KEY


class ShardedStrategy(ModelParallelStrategy):
    """Lightning's ModelParallelStrategy as plain FSDP: every process is one data-parallel rank
    (no tensor parallelism), and checkpoints are sharded folders written whole or not at all.

    Lightning's default splits the processes of a node into a tensor-parallel group; xfmr
    shards parameters over all of them (`shard_blocks`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(save_distributed_checkpoint=True, **kwargs)

    def setup_environment(self) -> None:
        # Known only now: the accelerator connector sets the node and process counts.
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None
    ) -> None:
        """Each rank writes its shard into a folder beside the target, which rank 0 then renames
        into place, so a run killed mid-save leaves the last whole checkpoint under its name
        (Lightning writes into the target itself, and its CheckpointIO is not used for sharded
        saves, so `AtomicCheckpointIO` cannot do it)."""
        checkpoint[TIED_KEY] = tied_parameters(self.lightning_module)
        path = Path(self.broadcast(str(filepath)))
        partial = path.with_name(f".{path.name}.partial")
        if self.global_rank == 0 and partial.exists():
            shutil.rmtree(partial)
        self.barrier("sharded_checkpoint_clean")
        super().save_checkpoint(checkpoint, partial, storage_options)
        self.barrier("sharded_checkpoint_written")
        if self.global_rank == 0:
            replace_folder(partial, path)
        self.barrier("sharded_checkpoint_renamed")


def tied_parameters(module: nn.Module) -> dict[str, str]:
    """Each parameter name that is another's parameter (a tied LM head): name -> first name."""
    first: dict[int, str] = {}
    tied = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        tied.update({name: first[id(parameter)]} if id(parameter) in first else {})
        first.setdefault(id(parameter), name)
    return tied


def replace_folder(new: Path, target: Path) -> None:
    """Put folder `new` at `target`: a rename where nothing is there; else the old one is
    renamed aside first and removed after, so a reader finds the old or the new at worst
    beside its `.old` name, never half of one."""
    if target.is_file():
        target.unlink()
    if not target.exists():
        new.rename(target)
        return
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    target.rename(old)
    new.rename(target)
    shutil.rmtree(old)


def shard_blocks(model: nn.Module, mesh: Any, *, precision: str, arch: str) -> None:
    """FSDP2 over `mesh`: each transformer `Block` its own unit (its parameters gathered only
    while it runs), then the rest (embeddings, final norm, heads) as the root unit. Under
    bf16-mixed the gathered parameters and the computation are bfloat16 while the sharded
    parameters, the optimizer's state and the gradients' reduction stay float32 (torchtitan's
    policy)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    blocks = [m for m in model.modules() if isinstance(m, Block)]
    if not blocks:
        raise UserError(
            f"trainer=fsdp shards a model per transformer block, and arch={arch} has none: "
            "train it with trainer=ddp or trainer=cpu"
        )
    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bf16-mixed"
        else MixedPrecisionPolicy()
    )
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
