"""Rotary frequencies, and their scaling for contexts longer than the model was made for.

RoPE (Su et al. 2021) turns channel pair i of a head of width d by the angle position * base^(-2i/d):
its wavelength is 2 pi base^(2i/d) positions. Scaling stretches wavelengths so that positions
past the original context land on angles the model has seen:

- linear (Chen et al. 2023, position interpolation): every frequency divided by `factor`;
- llama3 (Llama 3.1; the formula transformers' `_compute_llama3_parameters` uses): wavelengths
  shorter than original / high_freq_factor are kept (they resolve nearby tokens), those longer
  than original / low_freq_factor are divided by `factor`, and those between are blended
  linearly in original / wavelength.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class RopeScaling:
    """How rotary frequencies are scaled (`model.pos.rope_*`)."""

    kind: str  # "linear" or "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    @classmethod
    def of(cls, pos: Any) -> RopeScaling | None:
        """From a PosConfig; None where it scales nothing."""
        if pos.rope_scaling == "none":
            return None
        return cls(
            pos.rope_scaling,
            pos.rope_factor,
            pos.rope_low_freq_factor,
            pos.rope_high_freq_factor,
            pos.rope_original_max_positions,
        )


def rope_frequencies(
    head_dim: int, base: float, scaling: RopeScaling | None = None
) -> torch.Tensor:
    """(head_dim / 2,) angle per position of each channel pair, scaled by `scaling`."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = base**-exponents
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    original = scaling.original_max_positions
    wavelength = 2 * math.pi / inv_freq
    long = wavelength > original / scaling.low_freq_factor
    short = wavelength < original / scaling.high_freq_factor
    blend = (original / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )  # 0 at the long end, 1 at the short
    blended = (1 - blend) * inv_freq / scaling.factor + blend * inv_freq
    return torch.where(long, inv_freq / scaling.factor, torch.where(short, inv_freq, blended))
