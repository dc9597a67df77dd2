"""Transformer blocks: feed-forward, normalisation, and their pre-/post-LN arrangement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from xfmr.nn.attention import CrossAttention, MultiHeadAttention, attention_arguments
from xfmr.nn.cache import LayerCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.norms import NORMS, RMSNorm, build_norm
from xfmr.nn.parts import build_part

__all__ = [
    "ACTIVATIONS",
    "NORMS",
    "Activation",
    "Block",
    "FeedForward",
    "RMSNorm",
    "build_norm",
    "ffn_arguments",
    "norm_of",
]
from xfmr.nn.positions import Rotation


@dataclass(frozen=True)
class Activation:
    """A feed-forward nonlinearity; `gated` ones multiply act(x W0) by a second projection x W1."""

    make: Callable[[], nn.Module]
    gated: bool = False


class ReLUSquared(nn.Module):
    """relu(x)^2 (So et al. 2021, "Primer", sec. 3): the squared ReLU their search found."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(nn.ReLU),  # Vaswani et al. 2017, eq. 2
    "relu2": Activation(ReLUSquared),  # So et al. 2021 (Primer); modded-nanogpt
    "gelu": Activation(nn.GELU),  # exact erf form (Hendrycks & Gimpel 2016); BERT
    "gelu_tanh": Activation(lambda: nn.GELU(approximate="tanh")),  # GPT-2's `gelu_new`
    "swiglu": Activation(nn.SiLU, gated=True),  # Shazeer 2020; LLaMA
    # Shazeer 2020 uses exact GELU; T5 v1.1's "gated-gelu" uses the tanh form (`gelu_new`).
    "geglu": Activation(nn.GELU, gated=True),
    "geglu_tanh": Activation(lambda: nn.GELU(approximate="tanh"), gated=True),  # T5 v1.1
}


def ffn_arguments(config: ModelConfig) -> dict[str, Any]:
    """The keyword arguments xfmr's feed-forward is built with, from the model's config."""
    return dict(
        d_model=config.d_model,
        d_ff=config.d_ff,
        activation=config.activation,
        dropout=config.dropout,
        bias=config.bias,
    )


def norm_of(config: ModelConfig) -> nn.Module:
    """The config's norm over the model width."""
    return build_norm(config.norm, config.d_model, eps=config.norm_eps, bias=config.bias)


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 act(W1 x) (Vaswani et al. 2017, eq. 2).

    A gated activation (Shazeer 2020, "GLU Variants Improve Transformer") makes `up` project
    to 2 * d_ff, split into halves [gate | value]: FFN(x) = W2 (act(x W0) * x W1), where the
    FIRST half is W0 (the gated one, T5 v1.1 `wi_0`, LLaMA `gate_proj`) and the second W1
    (`wi_1`, `up_proj`). A gated FFN has 1.5x the parameters of a plain one at equal d_ff.
    """

    def __init__(
        self, *, d_model: int, d_ff: int, activation: str, dropout: float, bias: bool
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not one of {sorted(ACTIVATIONS)}")
        self.gated = ACTIVATIONS[activation].gated
        self.up = nn.Linear(d_model, 2 * d_ff if self.gated else d_ff, bias=bias)
        self.act = ACTIVATIONS[activation].make()
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, config: ModelConfig) -> FeedForward:
        return cls(**ffn_arguments(config))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, value = self.up(x).chunk(2, dim=-1)  # (B, T, d_ff) each
            return self.dropout(self.down(self.act(gate) * value))
        return self.dropout(self.down(self.act(self.up(x))))


class Block(nn.Module):
    """One self-attention (+ cross-attention) + FFN layer, shaped by the model's config.

    `placement="post"` is the original x = LN(x + f(x)) (Vaswani et al. 2017);
    `placement="pre"` is x = x + f(LN(x)) (GPT-2; Xiong et al. 2020), which trains
    without warm-up tricks and needs a final norm after the stack; `placement="sandwich"` is
    x = x + LN'(f(LN(x))) (Ding et al. 2021; Gemma 2's four norms a block), with the final norm.
    `layer` is the block's index in its stack, which decides its window (ModelConfig.window_of).
    With `cross_attention`, a decoder layer of an encoder-decoder: causal self-attention, then
    attention over the encoder states, then the FFN (Vaswani et al. 2017, sec. 3.1).
    The self-attention and the FFN are the config's own parts where it names them
    (`xfmr.nn.parts`); cross-attention is always xfmr's.
    """

    def __init__(
        self, config: ModelConfig, *, cross_attention: bool = False, layer: int = 0
    ) -> None:
        super().__init__()
        self.placement = config.placement
        self.attn_norm = norm_of(config)
        self.attn = self_attention(config, layer=layer)
        self.cross_norm = norm_of(config) if cross_attention else None
        self.cross_attn = CrossAttention.from_config(config) if cross_attention else None
        self.ffn_norm = norm_of(config)
        self.ffn = feed_forward(config)
        # sandwich: a second norm on each sublayer's output before the residual (Gemma 2)
        self.attn_post_norm = self.cross_post_norm = self.ffn_post_norm = None
        if config.placement == "sandwich":
            self.attn_post_norm, self.ffn_post_norm = norm_of(config), norm_of(config)
            self.cross_post_norm = norm_of(config) if cross_attention else None

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        rotation: Rotation | None = None,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x: (B, T, C); context: (B, S, C) encoder states, needed iff the block cross-attends.

        mask: boolean, or float with a positional bias already folded in (`fold_masks`).
        cache: this layer's keys and values from earlier decoding steps (see `KVCache`).
        """
        attend = dict(mask=mask, is_causal=is_causal, rotation=rotation, cache=cache)
        if self.placement == "sandwich":
            x = x + self.attn_post_norm(self.attn(self.attn_norm(x), **attend))
            if self.cross_attn is not None:
                cross = self.cross_attn(self.cross_norm(x), context, mask=context_mask, cache=cache)
                x = x + self.cross_post_norm(cross)
            return x + self.ffn_post_norm(self.ffn(self.ffn_norm(x)))
        if self.placement == "pre":
            x = x + self.attn(self.attn_norm(x), **attend)
            if self.cross_attn is not None:
                x = x + self.cross_attn(self.cross_norm(x), context, mask=context_mask, cache=cache)
            return x + self.ffn(self.ffn_norm(x))
        x = self.attn_norm(x + self.attn(x, **attend))
        if self.cross_attn is not None:
            x = self.cross_norm(x + self.cross_attn(x, context, mask=context_mask, cache=cache))
        return self.ffn_norm(x + self.ffn(x))


def self_attention(config: ModelConfig, *, layer: int = 0) -> nn.Module:
    """The config's self-attention: `model.attention`'s class, else MultiHeadAttention."""
    if config.attention is None:
        return MultiHeadAttention.from_config(config, layer=layer)
    return build_part("model.attention", config.attention, attention_arguments(config))


def feed_forward(config: ModelConfig) -> nn.Module:
    """The config's feed-forward: `model.ffn`'s class, else FeedForward."""
    if config.ffn is None:
        return FeedForward.from_config(config)
    return build_part("model.ffn", config.ffn, ffn_arguments(config))
