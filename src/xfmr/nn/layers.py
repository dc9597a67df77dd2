"""Transformer blocks: feed-forward, normalisation, and their pre-/post-LN arrangement."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.attention import MultiHeadAttention

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "gelu": nn.GELU,
    "relu": nn.ReLU,
}


def build_norm(name: str, d_model: int, *, eps: float, bias: bool) -> nn.Module:
    if name == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    raise ValueError(f"norm={name!r} is not one of ['layernorm']")


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 act(W1 x) (Vaswani et al. 2017, eq. 2)."""

    def __init__(
        self, *, d_model: int, d_ff: int, activation: str, dropout: float, bias: bool
    ) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[activation]()
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.act(self.up(x))))


class Block(nn.Module):
    """One self-attention + FFN layer.

    `placement="post"` is the original x = LN(x + f(x)) (Vaswani et al. 2017);
    `placement="pre"` is x = x + f(LN(x)) (GPT-2; Xiong et al. 2020), which trains
    without warm-up tricks and needs a final norm after the stack.
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
    ) -> None:
        super().__init__()
        self.placement = placement
        self.attn_norm = build_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.attn = MultiHeadAttention(
            d_model=d_model,
            n_heads=n_heads,
            attn_dropout=attn_dropout,
            resid_dropout=dropout,
            bias=bias,
        )
        self.ffn_norm = build_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.ffn = FeedForward(
            d_model=d_model, d_ff=d_ff, activation=activation, dropout=dropout, bias=bias
        )

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        if self.placement == "pre":
            x = x + self.attn(self.attn_norm(x), mask=mask, is_causal=is_causal)
            return x + self.ffn(self.ffn_norm(x))
        x = self.attn_norm(x + self.attn(x, mask=mask, is_causal=is_causal))
        return self.ffn_norm(x + self.ffn(x))
