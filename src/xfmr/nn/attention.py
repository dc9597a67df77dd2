"""Multi-head scaled dot-product attention (Vaswani et al. 2017, sec. 3.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean (T, T) mask, True where query t may attend to key s (s <= t)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) with 1 for real tokens -> boolean (B, 1, 1, S) key mask."""
    return attention_mask.bool()[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """AND together boolean masks that broadcast to (B, H, T, S); None means no mask.

    A query row that would see no key at all (a padding position under left padding)
    is opened to every key: its output is ignored downstream, and SDPA would return NaN.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    mask = present[0]
    for other in present[1:]:
        mask = mask & other
    return mask | ~mask.any(dim=-1, keepdim=True)


class MultiHeadAttention(nn.Module):
    """Self-attention with one fused QKV projection.

    Args:
        d_model: model width; split evenly across heads.
        n_heads: number of heads.
        attn_dropout: dropout on attention weights (training only).
        resid_dropout: dropout on the output projection.
        bias: whether projections carry a bias.
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.attn_dropout = attn_dropout
        self.resid_dropout = nn.Dropout(resid_dropout)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """x: (B, T, C). mask: boolean, broadcastable to (B, H, T, T), True = attend.

        With `is_causal` and no mask, SDPA applies the causal mask itself (its fast path).
        """
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        if is_causal and mask is not None:
            mask = combine_masks(causal_mask(T, x.device), mask)
            is_causal = False
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=is_causal,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.out(y))
