"""Multi-head scaled dot-product attention (Vaswani et al. 2017, sec. 3.2): self and cross.

Masking convention: a boolean mask is True where a query may attend to a key. An additive float
`bias` (a positional scheme's) is added to the scores. The two are folded into one float mask only
when both are present; plain causal attention with neither keeps SDPA's `is_causal` fast kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xfmr.nn.positions import Rotation, apply_rotary


def causal_mask(
    length: int, device: torch.device | None = None, *, key_length: int | None = None
) -> torch.Tensor:
    """Boolean (T, S) mask, True where query t may attend to key s.

    With S = T (the default) that is s <= t. With S > T the queries are the last T positions of
    the S keys (a KV cache), so query t sits at key position t + S - T.
    """
    key_length = length if key_length is None else key_length
    return torch.ones(length, key_length, dtype=torch.bool, device=device).tril(key_length - length)


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


def fold_masks(
    mask: torch.Tensor | None,
    bias: torch.Tensor | None,
    *,
    is_causal: bool,
    query_length: int,
    key_length: int,
) -> tuple[torch.Tensor | None, bool]:
    """What SDPA takes, `(attn_mask, is_causal)`, from a boolean mask, an additive bias and causality.

    Returns the inputs untouched when there is nothing to fold (no bias, and either no mask or no
    causality), so plain causal attention keeps `is_causal=True` and no mask. Otherwise causality
    becomes an explicit mask, and a bias with a mask becomes one float mask with -inf where the
    boolean mask is False. A stack calls this once per forward and hands the result to every layer.
    """
    if bias is None and (mask is None or not is_causal):
        return mask, is_causal
    if is_causal:
        device = (mask if mask is not None else bias).device
        mask = combine_masks(causal_mask(query_length, device, key_length=key_length), mask)
    elif mask is not None and mask.dtype == torch.bool:
        mask = combine_masks(mask)  # an all-padding row must not become all -inf (NaN)
    if bias is None:
        return mask, False
    if mask is None:
        return bias, False
    if mask.dtype != torch.bool:  # already a float mask: biases add
        return mask + bias, False
    return bias.masked_fill(~mask, float("-inf")), False


class _Attention(nn.Module):
    """What self- and cross-attention share: heads, scale, dropout, output projection."""

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float,
        resid_dropout: float,
        bias: bool,
        scale: float | None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.scale = scale
        self.attn_dropout = attn_dropout
        self.resid_dropout = nn.Dropout(resid_dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, C = x.shape
        return x.view(B, L, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, L, hs)

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)  # a float32 bias must match half-precision queries
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=is_causal,
            scale=self.scale,
        )  # (B, nh, T, hs)
        B, nh, T, hs = y.shape
        y = y.transpose(1, 2).reshape(B, T, nh * hs)  # (B, T, C)
        return self.resid_dropout(self.out(y))


class MultiHeadAttention(_Attention):
    """Self-attention with one fused QKV projection.

    Args:
        d_model: model width; split evenly across heads.
        n_heads: number of heads.
        attn_dropout: dropout on attention weights (training only).
        resid_dropout: dropout on the output projection.
        bias: whether projections carry a bias.
        scale: factor on q.k; None is 1/sqrt(head_dim) (Vaswani et al. 2017, eq. 1), T5 uses 1.0.
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        bias: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=resid_dropout,
            bias=bias,
            scale=scale,
        )
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        is_causal: bool = False,
        rotation: Rotation | None = None,
    ) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C).

        mask: boolean broadcastable to (B, H, T, T), True = attend, or an already folded float
            mask (see `fold_masks`). bias: additive float, broadcastable to (B, H, T, T).
        is_causal: with no mask and no bias, SDPA applies the causal mask itself (its fast path).
        rotation: (cos, sin) from rotary positions, applied to q and k.
        """
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        if rotation is not None:
            q, k = apply_rotary(q, *rotation), apply_rotary(k, *rotation)
        if bias is not None or (is_causal and mask is not None):
            mask, is_causal = fold_masks(
                mask, bias, is_causal=is_causal, query_length=T, key_length=T
            )
        return self._attend(q, k, v, mask, is_causal)


class CrossAttention(_Attention):
    """Queries from the decoder, keys and values from the encoder's last layer (Vaswani et al.
    2017, sec. 3.2.3): a q projection and one fused kv projection of the encoder states.

    Takes the same arguments as MultiHeadAttention. No positional bias or rotation (as in T5).
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        bias: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=resid_dropout,
            bias=bias,
            scale=scale,
        )
        self.q = nn.Linear(d_model, d_model, bias=bias)
        self.kv = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, *, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: (B, T, C) decoder states; context: (B, S, C) encoder states; mask: boolean
        broadcastable to (B, H, T, S), True = attend (a source padding mask) -> (B, T, C)."""
        k, v = self.kv(context).split(x.size(-1), dim=2)
        q, k, v = self._heads(self.q(x)), self._heads(k), self._heads(v)  # (B, nh, T|S, hs)
        return self._attend(q, k, v, mask, False)
