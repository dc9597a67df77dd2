"""Transformer blocks: feed-forward, normalisation, and their pre-/post-LN arrangement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from xfmr.nn.attention import CrossAttention, LayerCache, MultiHeadAttention
from xfmr.nn.positions import Rotation


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


@dataclass(frozen=True)
class Activation:
    """A feed-forward nonlinearity; `gated` ones multiply act(x W0) by a second projection x W1."""

    make: Callable[[], nn.Module]
    gated: bool = False


ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation(nn.ReLU),  # Vaswani et al. 2017, eq. 2
    "gelu": Activation(nn.GELU),  # exact erf form (Hendrycks & Gimpel 2016); BERT
    "gelu_tanh": Activation(lambda: nn.GELU(approximate="tanh")),  # GPT-2's `gelu_new`
    "swiglu": Activation(nn.SiLU, gated=True),  # Shazeer 2020; LLaMA
    # Shazeer 2020 uses exact GELU; T5 v1.1's "gated-gelu" uses the tanh form (`gelu_new`).
    "geglu": Activation(nn.GELU, gated=True),
    "geglu_tanh": Activation(lambda: nn.GELU(approximate="tanh"), gated=True),  # T5 v1.1
}


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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, value = self.up(x).chunk(2, dim=-1)  # (B, T, d_ff) each
            return self.dropout(self.down(self.act(gate) * value))
        return self.dropout(self.down(self.act(self.up(x))))


class Block(nn.Module):
    """One self-attention (+ cross-attention) + FFN layer.

    `placement="post"` is the original x = LN(x + f(x)) (Vaswani et al. 2017);
    `placement="pre"` is x = x + f(LN(x)) (GPT-2; Xiong et al. 2020), which trains
    without warm-up tricks and needs a final norm after the stack.
    With `cross_attention`, a decoder layer of an encoder-decoder: causal self-attention, then
    attention over the encoder states, then the FFN (Vaswani et al. 2017, sec. 3.1).
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        d_ff: int,
        activation: str,
        norm: str,
        norm_eps: float,
        placement: str,
        dropout: float,
        attn_dropout: float,
        bias: bool,
        scale: float | None = None,
        cross_attention: bool = False,
    ) -> None:
        super().__init__()
        self.placement = placement
        attention = dict(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=dropout,
            bias=bias,
            scale=scale,
        )
        self.attn_norm = build_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.attn = MultiHeadAttention(**attention)
        self.cross_norm = (
            build_norm(norm, d_model, eps=norm_eps, bias=bias) if cross_attention else None
        )
        self.cross_attn = CrossAttention(**attention) if cross_attention else None
        self.ffn_norm = build_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.ffn = FeedForward(
            d_model=d_model, d_ff=d_ff, activation=activation, dropout=dropout, bias=bias
        )

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
        if self.placement == "pre":
            x = x + self.attn(self.attn_norm(x), **attend)
            if self.cross_attn is not None:
                x = x + self.cross_attn(self.cross_norm(x), context, mask=context_mask, cache=cache)
            return x + self.ffn(self.ffn_norm(x))
        x = self.attn_norm(x + self.attn(x, **attend))
        if self.cross_attn is not None:
            x = self.cross_norm(x + self.cross_attn(x, context, mask=context_mask, cache=cache))
        return self.ffn_norm(x + self.ffn(x))
