"""Encoder-decoder models (Vaswani et al. 2017; T5, Raffel et al. 2020)."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.encoder import Encoder
from xfmr.nn.flex import softcap
from xfmr.nn.mup import Readout, logit_scale, readout_multiplier
from xfmr.nn.stack import TransformerStack
from xfmr.nn.weights import ParameterCount, init_weights


class EncoderDecoder(ParameterCount, nn.Module):
    """An encoder stack, and a decoder stack whose layers run causal self-attention, attention
    over the encoder's last layer, and an FFN; an output projection over the target vocabulary.

    With `share_embeddings`, source and target use one embedding (Vaswani et al. 2017, sec. 3.4,
    with a shared BPE vocabulary); with `tie_embeddings` the output projection is the target
    embedding too. `scale_logits` multiplies the decoder output by d_model**-0.5 before the
    projection (T5, which ties it). Each stack has its own positions: a relative bias is
    bidirectional in the encoder and causal in the decoder; cross-attention has none.

    `encode` and `decode` are exposed apart so that generation runs the encoder once.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = TransformerStack(
            config,
            n_layers=config.n_decoder_layers,
            causal=True,
            cross_attention=True,
            tok_emb=self.encoder.tok_emb if config.share_embeddings else None,
        )
        self.lm_head = Readout(
            config.d_model,
            config.padded_vocab_size,
            bias=False,
            multiplier=readout_multiplier(config),
        )
        if config.tie_embeddings:
            self.lm_head.weight = self.decoder.tok_emb.weight  # Press & Wolf 2017
        self.logit_scale = logit_scale(config)
        init_weights(self, config)

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Source ids (B, S) -> encoder states (B, S, C); document_ids (B, S) in packed rows."""
        return self.encoder(input_ids, attention_mask, token_type_ids, document_ids=document_ids)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        *,
        offset: int = 0,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
        context_document_ids: torch.Tensor | None = None,
        head: bool = True,
    ) -> torch.Tensor:
        """Target ids (B, T) and encoder states (B, S, C) -> logits (B, T, V).

        attention_mask: the source's (B, S); decoder_attention_mask: the target's (B, T).
        cache: the decoder's keys and values so far (these T tokens follow them) and the
            encoder's, projected on the first call.
        document_ids, context_document_ids: the target's (B, T) and the source's (B, S) in
            packed rows: each target attends to its own source only.
        head: False returns the hidden states the head reads (B, T, C) instead, for a loss
            that applies `lm_head` and the soft-cap itself (`xfmr.objectives.chunked_loss`).
        """
        hidden = self.decoder(
            decoder_input_ids,
            decoder_attention_mask,
            context=encoder_states,
            context_mask=attention_mask,
            offset=offset,
            cache=cache,
            document_ids=document_ids,
            context_document_ids=context_document_ids,
        )  # (B, T, C)
        if self.logit_scale is not None:
            hidden = hidden * self.logit_scale
        if not head:
            return hidden
        return softcap(self.lm_head(hidden), self.config.logit_softcap)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        decoder_input_ids: torch.Tensor,
        decoder_attention_mask: torch.Tensor | None = None,
        *,
        document_ids: torch.Tensor | None = None,
        decoder_document_ids: torch.Tensor | None = None,
        head: bool = True,
    ) -> torch.Tensor:
        """Source (B, S) and target (B, T) ids with their attention masks -> logits (B, T, V);
        in packed rows, the source's and the target's document ids; head=False: the hidden
        states the head reads (`decode`)."""
        encoder_states = self.encode(input_ids, attention_mask, document_ids=document_ids)
        return self.decode(
            decoder_input_ids,
            encoder_states,
            attention_mask,
            decoder_attention_mask,
            document_ids=decoder_document_ids,
            context_document_ids=document_ids,
            head=head,
        )
