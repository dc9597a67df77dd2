"""Whole models built from a ModelConfig; `build_model` picks one by `arch` from MODELS."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.encoder import EncoderLM
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.flex import softcap
from xfmr.nn.mup import Readout, readout_multiplier
from xfmr.nn.rnn import RNNLM
from xfmr.nn.stack import TransformerStack
from xfmr.nn.weights import ParameterCount, init_weights

__all__ = ["MODELS", "CausalLM", "DecoderOnly", "build_model", "init_weights"]


class DecoderOnly(TransformerStack):
    """GPT-style stack: token embedding + positions, causal blocks, final norm (pre-LN only).

    Returns hidden states (B, T, C); the LM head lives in `CausalLM`.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, n_layers=config.n_layers, causal=True)


class CausalLM(ParameterCount, nn.Module):
    """Decoder-only language model with an output projection tied to the input embedding."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = DecoderOnly(config)
        self.lm_head = Readout(
            config.d_model,
            config.padded_vocab_size,
            bias=False,
            multiplier=readout_multiplier(config),
        )
        if config.tie_embeddings:  # under µP, microsoft/mup's MuSharedReadout
            self.lm_head.weight = self.backbone.tok_emb.weight  # Press & Wolf 2017
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
        head: bool = True,
    ) -> torch.Tensor:
        """input_ids: (B, T) -> logits (B, T, V).

        positions: (B, T) per-row positions (left-padded prompts); cache: keys and values of
        the earlier tokens, extended by these (then `attention_mask` is (B, past + T));
        document_ids: (B, T) the example of each token in packed rows (`TransformerStack`).
        head: False returns the last hidden states (B, T, C) instead, for a loss that applies
        `lm_head` and the soft-cap itself (`xfmr.objectives.chunked_loss`).
        """
        hidden = self.backbone(
            input_ids, attention_mask, positions=positions, cache=cache, document_ids=document_ids
        )
        if not head:
            return hidden
        return softcap(self.lm_head(hidden), self.config.logit_softcap)


# arch -> the model `build_model` returns; each maps token ids to logits over the vocabulary.
MODELS: dict[str, type[nn.Module]] = {
    "decoder": CausalLM,
    "encoder": EncoderLM,
    "encoder_decoder": EncoderDecoder,
    "rnn": RNNLM,
}


def build_model(config: ModelConfig) -> nn.Module:
    """The model for `config.arch` (the config has already checked the name)."""
    return MODELS[config.arch](config)
