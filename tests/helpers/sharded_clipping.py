"""One rank of the clipping check (tests/training/test_fsdp.py): `python -m
helpers.sharded_clipping OUT` with the torch.distributed environment set (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), on CPU with gloo.

Each rank builds the same tiny decoder twice: one sharded per block as trainer=fsdp shards it
(`shard_blocks`), fed this rank's half of a batch, and one whole, fed the whole batch, as a
single process without sharding would train it. Both take one AdamW step after clipping by the
gradients' norm as xfmr clips (`gradient_norms`, then `clip_grads_with_norm_` by their total),
with a max norm well under the gradients' so that clipping acts. Rank 0 writes to OUT (JSON) the
two totals and the largest difference between the updated weights.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from xfmr.nn.config import ModelConfig
from xfmr.objectives import CausalLMObjective
from xfmr.training.guards import gradient_norms
from xfmr.training.sharding import shard_blocks

MAX_NORM = 0.05


def step(model: torch.nn.Module, objective: CausalLMObjective, batch: dict) -> torch.Tensor:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sums, _ = objective.forward(model, batch)  # summed over tokens; every token counts here
    (sums["tokens"] / batch["labels"].numel()).backward()
    norms = gradient_norms(list(model.named_parameters()))
    torch.nn.utils.clip_grads_with_norm_(norms.params, MAX_NORM, norms.total)
    optimizer.step()
    return norms.total


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    config = ModelConfig(vocab_size=50, n_layers=2, n_heads=2, d_model=16, dropout=0.0)
    objective = CausalLMObjective()
    torch.manual_seed(0)
    whole = objective.build_model(config)
    torch.manual_seed(0)
    sharded = objective.build_model(config)
    shard_blocks(sharded, init_device_mesh("cpu", (world,)), precision="32-true", arch="decoder")
    ids = torch.randint(0, 50, (2 * world, 9), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    mine = {k: v.chunk(world)[rank] for k, v in batch.items()}
    total_whole = step(whole, objective, batch)
    total_sharded = step(sharded, objective, mine)
    difference = max(
        (p.full_tensor() - q).abs().max().item()
        for p, q in zip(sharded.parameters(), whole.parameters(), strict=True)
    )
    if rank == 0:
        with open(out, "w") as file:
            json.dump(
                {
                    "whole": total_whole.item(),
                    "sharded": total_sharded.item(),
                    "max_norm": MAX_NORM,
                    "difference": difference,
                    "sharded_type": type(next(sharded.parameters())).__name__,
                },
                file,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
