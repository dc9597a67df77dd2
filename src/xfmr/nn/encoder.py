"""Encoder-only (BERT-style) models: bidirectional self-attention over the whole sequence."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.mup import Readout, readout_multiplier
from xfmr.nn.stack import TransformerStack
from xfmr.nn.weights import ParameterCount, init_weights


class Encoder(TransformerStack):
    """BERT-style stack (Devlin et al. 2019): token + optional segment embeddings (+ absolute
    positions), optional embedding norm, bidirectional blocks, final norm (pre-LN only).

    `forward(input_ids, attention_mask=None, token_type_ids=None)` returns hidden states
    (B, T, C). Weights keep PyTorch's defaults here; the models that hold an Encoder
    (`EncoderLM`, `EncoderDecoder`) initialise them.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(
            config,
            n_layers=config.n_layers,
            causal=False,
            type_vocab_size=config.type_vocab_size,
        )


class EncoderLM(ParameterCount, nn.Module):
    """An Encoder with a token-prediction head tied to its embedding: the least that lets an
    encoder train end to end (a BERT-style masked-LM head, with its transform, comes later)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Encoder(config)
        self.lm_head = Readout(
            config.d_model,
            config.padded_vocab_size,
            bias=False,
            multiplier=readout_multiplier(config),
        )
        if config.tie_embeddings:
            self.lm_head.weight = self.backbone.tok_emb.weight  # Press & Wolf 2017
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids: (B, T) -> logits (B, T, V); document_ids: (B, T) in packed rows."""
        hidden = self.backbone(input_ids, attention_mask, token_type_ids, document_ids=document_ids)
        return self.lm_head(hidden)
