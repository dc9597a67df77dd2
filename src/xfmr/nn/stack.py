"""One transformer stack: embeddings, positions, blocks, final norm. Every transformer arch
(decoder-only, encoder, both halves of an encoder-decoder) is one or two of these."""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.layers import Block, norm_of
from xfmr.nn.masks import (
    combine_masks,
    document_mask,
    document_positions,
    fold_masks,
    padding_mask,
    window_mask,
)
from xfmr.nn.positions import Rotation, scheme_of
from xfmr.nn.weights import ParameterCount


class TransformerStack(ParameterCount, nn.Module):
    """Token (+ segment) embeddings and positions, a stack of blocks, a final norm (pre-LN only):
    token ids in, hidden states (B, T, C) out.

    A positional bias is computed once per forward and folded with the masks into the one
    attention mask every layer uses; a rotation is likewise computed once and shared.
    With a `KVCache` the forward runs only the new tokens against every cached key.

    Args:
        config: the model's shape.
        n_layers: number of blocks.
        causal: causal self-attention, and a unidirectional relative bias (a decoder).
        cross_attention: blocks also attend to encoder states (an encoder-decoder's decoder).
        type_vocab_size: number of segment embeddings (BERT); 0 = none.
        tok_emb: a token embedding shared with another stack; None builds this stack's own.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        n_layers: int,
        causal: bool,
        cross_attention: bool = False,
        type_vocab_size: int = 0,
        tok_emb: nn.Embedding | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.causal = causal
        self.cross_attention = cross_attention
        self.tok_emb = (
            tok_emb
            if tok_emb is not None
            else nn.Embedding(config.padded_vocab_size, config.d_model)
        )
        self.type_emb = nn.Embedding(type_vocab_size, config.d_model) if type_vocab_size else None
        self.pos = scheme_of(config, bidirectional=not causal)
        self.embed_norm = norm_of(config) if config.embed_norm else None
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            Block(config, cross_attention=cross_attention, layer=i) for i in range(n_layers)
        )
        # the distinct sliding windows of the layers (None: a layer that sees every key)
        self.windows = sorted({w for i in range(n_layers) if (w := config.window_of(i))})
        self.final_norm = norm_of(config) if config.placement != "post" else nn.Identity()

    def embed(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        offset: int = 0,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, T) ids -> (B, T, C): token + segment + absolute position, then the embedding norm.

        positions: (B, T) per-row positions, used instead of offset .. offset+T-1.
        """
        x = self.tok_emb(input_ids)  # (B, T, C)
        if self.config.embed_scale:  # the tied embedding serves both ends (Vaswani et al. 3.4)
            x = x * self.config.d_model**0.5
        if self.type_emb is not None:  # segment 0 when no ids are given, as in BERT
            x = x + (
                self.type_emb.weight[0] if token_type_ids is None else self.type_emb(token_type_ids)
            )
        x = self.pos.embed(x, offset=offset, positions=positions)
        return x if self.embed_norm is None else self.embed_norm(x)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        offset: int = 0,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        document_ids: torch.Tensor | None = None,
        context_document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> hidden states (B, T, C).

        attention_mask: (B, T), 1 for real tokens; with a cache, (B, past + T), one per key.
        token_type_ids: (B, T) segment ids.
        context, context_mask: encoder states (B, S, C) and the source's (B, S) attention mask,
            for cross-attention (with a cache, only the first call uses `context`).
        offset: the position of the first token (with a cache, of the first cached one).
        positions: (B, T) per-row positions of the new tokens, for rows left-padded to one
            length (each row's first real token at 0). Absolute and rotary schemes use them;
            a bias sees key - query differences only, which the columns give exactly.
        cache: keys and values of earlier calls; this call appends the new tokens' and runs
            them against all past + T keys.
        document_ids: (B, T) which example each token belongs to, in rows that pack several:
            each attends only within its own (`document_mask`), and positions restart at each
            (`document_positions`); a bias scheme needs no restart, since it reads key - query
            differences, equal within one example wherever it sits in the row.
        context_document_ids: (B, S) the encoder states' examples, in packed rows: each token
            attends across to its own example's only.
        """
        if self.cross_attention and context is None:
            raise ValueError("a stack with cross-attention needs the encoder states `context`")
        if document_ids is not None:
            if cache is not None or positions is not None:
                raise ValueError("packed rows (document_ids) take no cache and no positions")
            positions = document_positions(document_ids)
        past = 0 if cache is None else cache.length
        start = offset + past  # position (column) of the first new token
        x = self.embed(input_ids, token_type_ids, offset=start, positions=positions)
        x = self.drop(x)  # (B, T, C)
        T = x.size(1)
        masks = self._self_attention_masks(
            attention_mask, T, past, start, x.device, documents=document_ids
        )
        rotation = self.pos.rotation(T, offset=start, positions=positions)
        cross_mask = None if context_mask is None else padding_mask(context_mask)
        if document_ids is not None and context_document_ids is not None:
            same = (document_ids[:, :, None] == context_document_ids[:, None, :])[:, None]
            cross_mask = combine_masks(cross_mask, same)  # (B, 1, T, S)
        return self.final_norm(self._blocks(x, masks, rotation, context, cross_mask, cache))

    def _blocks(
        self,
        x: torch.Tensor,
        masks: dict[int | None, tuple[torch.Tensor | None, bool]],
        rotation: Rotation | None,
        context: torch.Tensor | None,
        cross_mask: torch.Tensor | None,
        cache: KVCache | None,
    ) -> torch.Tensor:
        """x (B, T, C) through every block, each with the mask of its window."""
        recompute = self.config.activation_checkpointing and torch.is_grad_enabled()
        for index, block in enumerate(self.blocks):
            mask, is_causal = masks[self.config.window_of(index)]
            attend = dict(
                mask=mask,
                is_causal=is_causal,
                rotation=rotation,
                context=context,
                context_mask=cross_mask,
                cache=None if cache is None else cache.layer(index),
            )
            if recompute:  # keep the block's input only; run it again in backward
                x = checkpoint(block, x, use_reentrant=False, **attend)
            else:
                x = block(x, **attend)
        return x

    def _self_attention_masks(
        self,
        attention_mask: torch.Tensor | None,
        T: int,
        past: int,
        start: int,
        device: torch.device,
        *,
        documents: torch.Tensor | None = None,
    ) -> dict[int | None, tuple[torch.Tensor | None, bool]]:
        """The self-attention masks the layers use for T new queries (the first at position
        `start`) against `past` cached + T keys: padding, positional bias and causality folded
        (`fold_masks`), keyed by window (None: every key). A window's mask also keeps each
        query within it, and covers only the keys its layers' caches hold (the last
        window - 1 of the past) and the new ones."""
        if attention_mask is not None and attention_mask.size(1) != past + T:
            raise ValueError(
                f"attention_mask covers {attention_mask.size(1)} keys, but there are "
                f"{past} cached + {T} new"
            )
        padding = None if attention_mask is None else padding_mask(attention_mask)
        if documents is not None:  # packed rows: each example sees only itself
            padding = combine_masks(padding, document_mask(documents))
        fold = functools.partial(
            fold_masks,
            bias=self.pos.attention_bias(T, offset=start, key_length=past + T),  # (1, H, T, S)
            is_causal=self.causal,
            query_length=T,
            key_length=past + T,
            device=device,
        )
        masks = {None: fold(padding)}
        for window in self.windows:
            near = window_mask(T, window, causal=self.causal, key_length=past + T, device=device)
            mask, _ = fold(combine_masks(near, padding))
            masks[window] = (mask[..., past - min(past, window - 1) :], False)
        return masks
