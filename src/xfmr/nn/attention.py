"""Multi-head scaled dot-product attention (Vaswani et al. 2017, sec. 3.2): self and cross.

Masks follow `xfmr.nn.masks`: a boolean mask is True where a query may attend to a key; a float
mask is added to the scores.

Decoding keeps a `KVCache`: each self-attention layer appends the new tokens' keys and values
(rotated first, under rotary positions) and attends over all of them; cross-attention projects
the encoder states once and reuses them. `record_attention` captures attention weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xfmr.nn.cache import LayerCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.flex import FLEX_MIN_HEAD_DIM, flex_softcapped, scores_of
from xfmr.nn.masks import fold_masks
from xfmr.nn.mup import attention_scale
from xfmr.nn.norms import build_norm
from xfmr.nn.positions import Rotation, apply_rotary


@dataclass
class AttentionRecord:
    """One attention call seen by `record_attention`.

    Args:
        layer: the attention module's path in the model, e.g. "decoder.blocks.0.cross_attn".
        kind: "self" or "cross".
        weights: (B, H, T, S) probabilities after masking and softmax, detached, float32.
    """

    layer: str
    kind: str
    weights: torch.Tensor


@contextmanager
def record_attention(model: nn.Module) -> Iterator[list[AttentionRecord]]:
    """Within the block, every attention call in `model` appends an `AttentionRecord` to the
    yielded list. Recording switches those calls from SDPA to an explicit softmax(q k^T * scale
    + mask) (slower, same outputs); outside the block nothing changes.
    """
    records: list[AttentionRecord] = []
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, _Attention)]
    previous = [m.__dict__.get("_recorder") for _, m in modules]
    for name, module in modules:
        module._recorder = (name, records)
    try:
        yield records
    finally:
        for (_, module), before in zip(modules, previous, strict=True):
            if before is None:
                del module._recorder
            else:
                module._recorder = before


class _Attention(nn.Module):
    """What self- and cross-attention share: heads, scale, dropout, output projection."""

    kind = "self"
    _recorder: tuple[str, list[AttentionRecord]] | None = None  # set by `record_attention`

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float,
        resid_dropout: float,
        bias: bool,
        scale: float | None,
        qk_norm: str = "none",
        norm_eps: float = 1e-5,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.softcap = softcap
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.scale = scale
        self.attn_dropout = attn_dropout
        self.resid_dropout = nn.Dropout(resid_dropout)
        # q and k normalised over each head's channels, before positions (OLMo 2, Qwen3): the
        # logits stay bounded whatever the projections' growth.
        self.q_norm = self.k_norm = None
        if qk_norm != "none":
            head_dim = d_model // n_heads
            self.q_norm = build_norm(qk_norm, head_dim, eps=norm_eps, bias=bias)
            self.k_norm = build_norm(qk_norm, head_dim, eps=norm_eps, bias=bias)

    @classmethod
    def from_config(cls, config: ModelConfig) -> _Attention:
        """Built with the config's arguments (`attention_arguments`)."""
        return cls(**attention_arguments(config))

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
        """Attention over (B, nh, T, hs) q and (B, nh, S, hs) k, v, then the output projection.

        SDPA where the scores are q k^T as they are; with a soft-cap, FlexAttention on a GPU
        (`xfmr.nn.flex`), and the written-out softmax on a CPU (FlexAttention has no backward
        there), for heads narrower than its kernels take, while recording, or with attention
        dropout (FlexAttention has none).
        """
        written = self._recorder is not None or (
            self.softcap is not None
            and not (
                q.is_cuda
                and q.size(-1) >= FLEX_MIN_HEAD_DIM
                and (self.attn_dropout == 0.0 or not self.training)
            )
        )
        if written:
            y = self._attend_written(q, k, v, mask, is_causal)  # (B, nh, T, hs)
        elif self.softcap is not None:
            y = flex_softcapped(
                q, k, v, mask, is_causal=is_causal, scale=self.scale, cap=self.softcap
            )
        else:
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

    def _attend_written(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        is_causal: bool,
    ) -> torch.Tensor:
        """SDPA written out (Vaswani et al. 2017, eq. 1), with the soft-cap, in float32; the
        weights go to the recorder when one is set."""
        scores = scores_of(q, k, mask, is_causal=is_causal, scale=self.scale, cap=self.softcap)
        weights = scores.softmax(dim=-1)  # (B, nh, T, S)
        if self._recorder is not None:
            name, records = self._recorder
            records.append(AttentionRecord(layer=name, kind=self.kind, weights=weights.detach()))
        weights = F.dropout(weights, self.attn_dropout, training=self.training)
        return weights.to(v.dtype) @ v  # (B, nh, T, hs)


def attention_arguments(config: ModelConfig) -> dict[str, Any]:
    """The keyword arguments xfmr's attentions are built with, from the model's config."""
    return dict(
        d_model=config.d_model,
        n_heads=config.n_heads,
        attn_dropout=config.attn_dropout,
        resid_dropout=config.dropout,
        bias=config.bias,
        scale=attention_scale(config),  # T5: 1, no 1/sqrt(d_head); µP: 1/d_head
        qk_norm=config.qk_norm,
        norm_eps=config.norm_eps,
        softcap=config.attn_softcap,
    )


class MultiHeadAttention(_Attention):
    """Self-attention with one fused QKV projection.

    Args:
        d_model: model width; split evenly across heads.
        n_heads: number of heads.
        n_kv_heads: key/value heads, each shared by n_heads / n_kv_heads consecutive query
            heads (ModelConfig.n_kv_heads); None: n_heads. A cache keeps n_kv_heads heads.
        attn_dropout: dropout on attention weights (training only).
        resid_dropout: dropout on the output projection.
        bias: whether projections carry a bias.
        scale: factor on q.k; None is 1/sqrt(head_dim) (Vaswani et al. 2017, eq. 1), T5 uses 1.0.
        qk_norm: none, layernorm or rmsnorm over each head's q and k, before rotation.
        norm_eps: that norm's epsilon.
        softcap: scores capped to softcap * tanh(s / softcap) before the softmax (Gemma 2).
        window: this layer's sliding window (ModelConfig.window_of): a cache keeps only the
            last window - 1 keys, all the next query can see. The mask that limits what each
            query sees is the caller's (`TransformerStack` builds one per window).
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        window: int | None = None,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        bias: bool = True,
        scale: float | None = None,
        qk_norm: str = "none",
        norm_eps: float = 1e-5,
        softcap: float | None = None,
    ) -> None:
        super().__init__(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=resid_dropout,
            bias=bias,
            scale=scale,
            qk_norm=qk_norm,
            norm_eps=norm_eps,
            softcap=softcap,
        )
        self.n_kv_heads = n_kv_heads or n_heads  # ModelConfig checks n_heads % n_kv_heads
        self.window = window
        kv_width = self.n_kv_heads * (d_model // n_heads)
        self.qkv = nn.Linear(d_model, d_model + 2 * kv_width, bias=bias)  # [q | k | v]
        self.out = nn.Linear(d_model, d_model, bias=bias)

    @classmethod
    def from_config(cls, config: ModelConfig, *, layer: int = 0) -> MultiHeadAttention:
        """Layer `layer`'s self-attention: its window is `config.window_of(layer)`."""
        return cls(
            **attention_arguments(config),
            n_kv_heads=config.n_kv_heads,
            window=config.window_of(layer),
        )

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        is_causal: bool = False,
        rotation: Rotation | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x: (B, T, C) -> (B, T, C).

        mask: boolean broadcastable to (B, H, T, S), True = attend, or an already folded float
            mask (see `fold_masks`). bias: additive float, broadcastable to (B, H, T, S).
        is_causal: with no mask and no bias, SDPA applies the causal mask itself (its fast path).
        rotation: (cos, sin) from rotary positions, applied to q and k.
        cache: this layer's keys and values so far; the new ones are appended (S = past + T),
            after rotation, so each key keeps the rotation of its own position.
        """
        B, T, C = x.shape
        hs, kv = C // self.n_heads, self.n_kv_heads
        q, k, v = self.qkv(x).split((C, kv * hs, kv * hs), dim=2)
        q = q.view(B, T, self.n_heads, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, kv, hs).transpose(1, 2)  # (B, nkv, T, hs)
        v = v.view(B, T, kv, hs).transpose(1, 2)  # (B, nkv, T, hs)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotation is not None:
            q, k = apply_rotary(q, *rotation), apply_rotary(k, *rotation)
        if cache is not None:
            # (B, nkv, S, hs): the cache keeps the shared heads, and a window's last window - 1
            k, v = cache.append(k, v, keep=None if self.window is None else self.window - 1)
        if kv != self.n_heads:  # each key/value head serves n_heads / kv consecutive queries
            k = k.repeat_interleave(self.n_heads // kv, dim=1)  # (B, nh, S, hs)
            v = v.repeat_interleave(self.n_heads // kv, dim=1)
        S = k.size(2)
        if bias is not None or (is_causal and (mask is not None or S != T)):
            mask, is_causal = fold_masks(
                mask, bias, is_causal=is_causal, query_length=T, key_length=S, device=q.device
            )
        return self._attend(q, k, v, mask, is_causal)


class CrossAttention(_Attention):
    """Queries from the decoder, keys and values from the encoder's last layer (Vaswani et al.
    2017, sec. 3.2.3): a q projection and one fused kv projection of the encoder states.

    Takes the same arguments as MultiHeadAttention. No positional bias or rotation (as in T5).
    """

    kind = "cross"

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        bias: bool = True,
        scale: float | None = None,
        qk_norm: str = "none",
        norm_eps: float = 1e-5,
        softcap: float | None = None,
    ) -> None:
        super().__init__(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=resid_dropout,
            bias=bias,
            scale=scale,
            qk_norm=qk_norm,
            norm_eps=norm_eps,
            softcap=softcap,
        )
        self.q = nn.Linear(d_model, d_model, bias=bias)
        self.kv = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x: (B, T, C) decoder states; context: (B, S, C) encoder states; mask: boolean
        broadcastable to (B, H, T, S), True = attend (a source padding mask) -> (B, T, C).

        cache: where the encoder's keys and values are kept after the first call, which
        projects them; later calls reuse them and ignore `context`.
        """
        if cache is not None and cache.cross_keys is not None:
            k, v = cache.cross_keys, cache.cross_values  # (B, nh, S, hs)
        else:
            k, v = self.kv(context).split(x.size(-1), dim=2)
            k, v = self._heads(k), self._heads(v)  # (B, nh, S, hs)
            if self.k_norm is not None:
                k = self.k_norm(k)
            if cache is not None:
                cache.cross_keys, cache.cross_values = k, v
        q = self._heads(self.q(x))  # (B, nh, T, hs)
        if self.q_norm is not None:
            q = self.q_norm(q)
        return self._attend(q, k, v, mask, False)
