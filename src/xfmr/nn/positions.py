"""Absolute positional schemes; each adds a (T, C) signal to the token embeddings.

Adding a scheme: one class here, registered in POSITIONS, and one YAML file in conf/pos/.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class NoPositions(nn.Module):
    """No positional signal: attention alone is then permutation equivariant."""

    max_positions: int | None = None

    def __init__(self, *, d_model: int, max_positions: int | None = None) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, sec. 3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]  # (T, 1)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


class SinusoidalPositions(nn.Module):
    """Fixed sinusoids; any length up to `max_positions` (a table size, not a learned limit)."""

    def __init__(self, *, d_model: int, max_positions: int | None = None) -> None:
        super().__init__()
        self.max_positions = max_positions or 8192
        self.register_buffer(
            "table", sinusoidal_table(self.max_positions, d_model), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[: x.size(1)].to(x.dtype)


class LearnedPositions(nn.Module):
    """A learned embedding per position (GPT, BERT); sequences longer than the table fail."""

    def __init__(self, *, d_model: int, max_positions: int | None = None) -> None:
        super().__init__()
        if not max_positions:
            raise ValueError("learned positions need pos.max_positions >= 1")
        self.max_positions = max_positions
        self.embedding = nn.Embedding(max_positions, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        if T > self.max_positions:
            raise ValueError(f"sequence length {T} exceeds pos.max_positions={self.max_positions}")
        return x + self.embedding.weight[:T]


POSITIONS: dict[str, type[nn.Module]] = {
    "none": NoPositions,
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
}


def build_positions(name: str, *, d_model: int, max_positions: int | None) -> nn.Module:
    if name not in POSITIONS:
        raise ValueError(f"pos.name={name!r} is not one of {sorted(POSITIONS)}")
    return POSITIONS[name](d_model=d_model, max_positions=max_positions)
