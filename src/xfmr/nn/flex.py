"""Attention whose scores are modified before the softmax: soft-capping (Gemma 2), written out
as a plain softmax(s(q k^T)) v, and on FlexAttention (`torch.nn.attention.flex_attention`).

SDPA takes a mask or an additive bias but cannot change the scores themselves; FlexAttention
takes a `score_mod` and compiles it into a fused kernel on a GPU. On a CPU FlexAttention has no
backward (torch 2.13), so training there takes the written-out form; both are held to one
reference in tests/nn/test_attention_variants.py.
"""

from __future__ import annotations

import functools

import torch
from torch.nn.attention.flex_attention import flex_attention

from xfmr.nn.masks import causal_mask


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap): x where |x| << cap, bounded by +-cap (Gemma 2); x itself for None."""
    return x if cap is None else cap * torch.tanh(x / cap)


def scores_of(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    is_causal: bool,
    scale: float | None,
    cap: float | None,
) -> torch.Tensor:
    """(B, H, T, S) float32 scores, capped, then masked (-inf) or biased by `mask`."""
    T, S = q.size(-2), k.size(-2)
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = softcap((q.float() @ k.float().transpose(-2, -1)) * scale, cap)  # (B, H, T, S)
    if is_causal:
        scores = scores.masked_fill(~causal_mask(T, q.device, key_length=S), float("-inf"))
    if mask is not None:
        scores = (
            scores + mask.float()
            if mask.is_floating_point()
            else scores.masked_fill(~mask, float("-inf"))
        )
    return scores


# The narrowest head FlexAttention's GPU kernels take (torch 2.11's Inductor: "embedding
# dimension of the query, key, and value must be at least 16"); narrower heads take the
# written-out softmax.
FLEX_MIN_HEAD_DIM = 16


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def flex_softcapped(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    is_causal: bool,
    scale: float | None,
    cap: float,
) -> torch.Tensor:
    """softmax(cap * tanh(scale q k^T / cap) + mask) v on FlexAttention: (B, H, T, hs).

    The mask (boolean, or float with a positional bias folded in) is read inside `score_mod`
    at each (batch, head, query, key), so any mask `fold_masks` makes is taken as it is. Compiled
    on a GPU (outside an enclosing `torch.compile`, which traces it itself); eager elsewhere.
    """
    B, H, T, S = q.size(0), q.size(1), q.size(-2), k.size(-2)
    if is_causal:
        causal = causal_mask(T, q.device, key_length=S)
        mask = (
            causal
            if mask is None
            else mask & causal
            if mask.dtype == torch.bool
            else (mask.masked_fill(~causal, float("-inf")))
        )
    if mask is not None:
        mask = mask.expand(B, H, T, S)  # indexable by every (b, h, q, kv)

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 (FlexAttention's contract)
        score = cap * torch.tanh(score / cap)
        if mask is None:
            return score
        if mask.dtype == torch.bool:
            return torch.where(mask[b, h, q_idx, kv_idx], score, float("-inf"))
        return score + mask[b, h, q_idx, kv_idx].to(score.dtype)

    compiled = q.is_cuda and not torch.compiler.is_compiling()
    attend = _compiled_flex() if compiled else flex_attention
    return attend(q, k, v, score_mod=score_mod, scale=scale)
