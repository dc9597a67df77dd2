"""A training module on a tiny model whose step runs without a Trainer: what the exactness
tests of the loss (accumulation, DDP's sum, auxiliary terms) drive by hand."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import torch

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.objectives.contract import Objective
from xfmr.training.module import XfmrModule


class _Strategy:
    """What the training step asks of Lightning's strategy: the backward (`manual_backward`),
    and DDP's `no_sync` for the window's backwards before its last."""

    def backward(self, loss: torch.Tensor, optimizer: Any) -> None:
        loss.backward()

    def block_backward_sync(self) -> Any:
        return nullcontext()


def step_module(
    objective: Objective, arch: str, *, vocab_size: int, world_size: int = 1
) -> XfmrModule:
    """The module on a one-layer model of width 16, in training mode; its update is left out,
    so a test reads the step's loss and gradients. The ranks' sum (`_all_ranks`) is the
    test's to make when `world_size` > 1."""
    torch.manual_seed(0)
    config = ModelConfig(
        arch=arch,
        vocab_size=vocab_size,
        n_layers=1,
        n_heads=2,
        d_model=16,
        dropout=0.0,
        attn_dropout=0.0,
        type_vocab_size=2,
        pos=PosConfig(name="learned", max_positions=32),
    )
    module = XfmrModule(
        model=objective.build_model(config),
        model_config={},
        objective=objective,
        optimizer=torch.optim.SGD,
    )
    module.trainer = SimpleNamespace(world_size=world_size, strategy=_Strategy())
    module._optimizer_step = lambda: None
    return module.train()
