"""Normalisation layers by name: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019),
for the blocks, the embeddings and per-head q/k normalisation."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight: no mean subtraction, no bias (Zhang & Sennrich 2019;
    T5's `T5LayerNorm`). The mean square is taken in float32 even for half-precision inputs."""

    def __init__(self, d_model: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_square = x.float().pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        return (x.float() * torch.rsqrt(mean_square + self.eps)).to(x.dtype) * self.weight


# name -> (d_model, eps, bias) -> module. RMSNorm has no bias whatever `bias` says (T5).
NORMS: dict[str, Callable[[int, float, bool], nn.Module]] = {
    "layernorm": lambda d_model, eps, bias: nn.LayerNorm(d_model, eps=eps, bias=bias),
    "rmsnorm": lambda d_model, eps, bias: RMSNorm(d_model, eps=eps),
}


def build_norm(name: str, d_model: int, *, eps: float, bias: bool) -> nn.Module:
    if name not in NORMS:
        raise ValueError(f"norm={name!r} is not one of {sorted(NORMS)}")
    return NORMS[name](d_model, eps, bias)
