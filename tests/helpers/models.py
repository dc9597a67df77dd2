"""Random weights for model tests."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def randomize(model: nn.Module, *, std: float, seed: int = 0) -> nn.Module:
    """Redraw every parameter: norm gains around one, everything else N(0, std^2), so that
    distributions are far from uniform, no two sequences tie and a weight mapped to the wrong
    place changes the logits. Eval mode."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            noise = torch.randn(param.shape, generator=generator)
            is_gain = name == "weight" and "norm" in type(module).__name__.lower()
            param.copy_(1.0 + 0.3 * noise if is_gain else std * noise)
    return model.eval()
