"""Whole models built from a ModelConfig."""

from __future__ import annotations

import math

import torch
from torch import nn

from xfmr.nn.attention import padding_mask
from xfmr.nn.config import ModelConfig
from xfmr.nn.layers import Block, build_norm
from xfmr.nn.positions import build_positions


class DecoderOnly(nn.Module):
    """GPT-style stack: token embedding + positions, causal blocks, final norm (pre-LN only).

    Returns hidden states (B, T, C); the LM head lives in `CausalLM`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = build_positions(
            config.pos.name, d_model=config.d_model, max_positions=config.pos.max_positions
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(_block(config) for _ in range(config.n_layers))
        self.final_norm = (
            build_norm(config.norm, config.d_model, eps=config.norm_eps, bias=config.bias)
            if config.placement == "pre"
            else nn.Identity()
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.drop(self.pos(self.tok_emb(input_ids)))  # (B, T, C)
        mask = None if attention_mask is None else padding_mask(attention_mask)
        for block in self.blocks:
            x = block(x, mask=mask, is_causal=True)
        return self.final_norm(x)


class CausalLM(nn.Module):
    """Decoder-only language model with an output projection tied to the input embedding."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = DecoderOnly(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.backbone.tok_emb.weight  # Press & Wolf 2017
        init_weights(self, config)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids: (B, T) -> logits (B, T, V)."""
        return self.lm_head(self.backbone(input_ids, attention_mask))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def init_weights(model: nn.Module, config: ModelConfig) -> None:
    """N(0, 0.02) for matrices and embeddings, zero biases; residual output projections
    scaled by 1/sqrt(2 * n_layers) so the residual stream's variance does not grow with depth (GPT-2)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            std = config.init_std
            if name.endswith(("attn.out", "ffn.down")):
                std = config.init_std / math.sqrt(2 * config.n_layers)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=config.init_std)


MODELS: dict[str, type[nn.Module]] = {"decoder": CausalLM}


def build_model(config: ModelConfig) -> nn.Module:
    return MODELS[config.arch](config)


def _block(config: ModelConfig) -> Block:
    return Block(
        d_model=config.d_model,
        n_heads=config.n_heads,
        d_ff=config.d_ff,
        activation=config.activation,
        norm=config.norm,
        norm_eps=config.norm_eps,
        placement=config.placement,
        dropout=config.dropout,
        attn_dropout=config.attn_dropout,
        bias=config.bias,
    )
