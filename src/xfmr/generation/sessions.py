"""One decoding session per model family: what runs the model for the next-token logits, with or
without a KV cache, and keeps its rows in step with the search (beams reordered, finished rows
dropped).

Every session offers the same three calls, on N rows:
    first_logits()         (N, V) next-token logits after the prompt / the decoder start token
    next_logits(tokens)    feed the (N,) tokens just chosen -> (N, V)
    reorder(index, same_sources=...)   keep rows `index` in that order; `same_sources` promises
                           each row keeps its source (beam parents), so the encoder's keys and
                           values need not move

Prompts of different lengths: a decoder gets them left-padded with per-row positions (each row's
first real token at position 0), so every row's next token lands in one column; an RNN gets
them right-padded and packed, so pads never enter its state.
"""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.cache import KVCache
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.models import CausalLM
from xfmr.nn.rnn import RNNLM


class Prompt:
    """Each row's real tokens, laid out left- or right-padded.

    Args:
        ids: (B, T) token ids; mask: (B, T), 1 = real token, rows may be padded on either side.
        pad_id: the id written into pad positions.
    """

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor, *, pad_id: int) -> None:
        self.mask = mask.long()
        self.lengths = self.mask.sum(dim=1)  # (B,)
        self.rows = [row[keep.bool()].tolist() for row, keep in zip(ids, self.mask, strict=True)]
        self.source_ids, self.pad_id = ids, pad_id

    def padded(self, side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask), each (B, max length), real tokens packed to the right or left side."""
        B, width = len(self.rows), int(self.lengths.max())
        rank = self.mask.cumsum(dim=1) - 1  # (B, T): each real token's index in its row
        if side == "left":
            rank = rank + (width - self.lengths)[:, None]
        ids = torch.full((B, width), self.pad_id, dtype=torch.long, device=self.mask.device)
        rows, columns = self.mask.bool().nonzero(as_tuple=True)
        ids[rows, rank[rows, columns]] = self.source_ids[rows, columns]
        positions = torch.arange(width, device=self.mask.device)
        lengths = self.lengths[:, None]
        mask = positions >= width - lengths if side == "left" else positions < lengths
        return ids, mask.long()


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) left-padded attention mask -> each token's position in its row (pads at 0)."""
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


class CausalSession:
    """A decoder-only LM over left-padded prompts: one prefill, then one token per step."""

    def __init__(self, model: CausalLM, prompt: Prompt, *, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.ids, self.mask = prompt.padded("left")  # (B, P) each
        self.padded = bool((prompt.lengths != self.ids.size(1)).any())  # else no mask needed
        self.next_position = prompt.lengths.clone()  # (B,)
        self.cache = KVCache() if use_cache else None

    def _run(self, ids: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        mask = self.mask if self.padded else None
        if not self.padded:
            positions = None  # every row starts at column 0: offsets alone are exact
        return self.model(ids, mask, positions=positions, cache=self.cache)[:, -1]

    def first_logits(self) -> torch.Tensor:
        return self._run(self.ids, positions_of(self.mask))

    def next_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        if self.use_cache:
            positions = self.next_position[:, None]  # (N, 1)
            self.next_position = self.next_position + 1
            return self._run(tokens[:, None], positions)
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        return self._run(self.ids, positions_of(self.mask))

    def reorder(self, index: torch.Tensor, *, same_sources: bool) -> None:
        self.ids, self.mask = self.ids.index_select(0, index), self.mask.index_select(0, index)
        self.next_position = self.next_position.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, cross=False)  # a decoder-only cache has no cross part


class Seq2SeqSession:
    """An encoder-decoder: the source encoded once (right-padded), the decoder fed from its
    start token, every row at the same position."""

    def __init__(
        self, model: EncoderDecoder, prompt: Prompt, *, use_cache: bool, decoder_start_id: int
    ) -> None:
        self.model, self.use_cache = model, use_cache
        source, source_mask = prompt.padded("right")  # (B, S) each
        self.source_mask = source_mask if (source_mask == 0).any() else None
        self.states = model.encode(source, self.source_mask)  # (B, S, C)
        self.ids = torch.full((source.size(0), 1), decoder_start_id, device=source.device)
        self.cache = KVCache() if use_cache else None

    def _run(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model.decode(ids, self.states, self.source_mask, cache=self.cache)
        return logits[:, -1]

    def first_logits(self) -> torch.Tensor:
        return self._run(self.ids)

    def next_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        return self._run(tokens[:, None] if self.use_cache else self.ids)

    def reorder(self, index: torch.Tensor, *, same_sources: bool) -> None:
        self.ids = self.ids.index_select(0, index)
        if not same_sources:  # beams of one source share these; only new row sets move them
            self.states = self.states.index_select(0, index)
            if self.source_mask is not None:
                self.source_mask = self.source_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, cross=not same_sources)


class RecurrentSession:
    """An RNN LM: the prompt right-padded and packed, then its hidden state carried from step to
    step (the cache of a recurrence); without the cache, every step reruns the whole sequence."""

    def __init__(self, model: RNNLM, prompt: Prompt, *, use_cache: bool) -> None:
        self.model, self.use_cache = model, use_cache
        self.ids, _ = prompt.padded("right")  # (B, P)
        self.lengths = prompt.lengths.clone()  # (B,)
        self.state = None

    def _run_all(self) -> torch.Tensor:
        logits, self.state = self.model.run(self.ids, lengths=self.lengths)
        return logits[torch.arange(self.ids.size(0)), self.lengths - 1]  # (N, V)

    def first_logits(self) -> torch.Tensor:
        return self._run_all()

    def next_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.use_cache:
            logits, self.state = self.model.run(tokens[:, None], state=self.state)
            return logits[:, -1]
        pad = torch.zeros_like(self.ids[:, :1])
        self.ids = torch.cat([self.ids, pad], dim=1).scatter(
            1, self.lengths[:, None], tokens[:, None]
        )
        self.lengths = self.lengths + 1
        return self._run_all()

    def reorder(self, index: torch.Tensor, *, same_sources: bool) -> None:
        self.ids, self.lengths = (
            self.ids.index_select(0, index),
            self.lengths.index_select(0, index),
        )
        if isinstance(self.state, tuple):  # LSTM: (h, c), each (n_layers, N, C)
            self.state = tuple(part.index_select(1, index) for part in self.state)
        elif self.state is not None:
            self.state = self.state.index_select(1, index)


Session = CausalSession | Seq2SeqSession | RecurrentSession
SUPPORTED = (CausalLM, EncoderDecoder, RNNLM)


def open_session(
    model: nn.Module, prompt: Prompt, *, use_cache: bool, decoder_start_id: int | None
) -> Session:
    """The session for `model`'s family (CausalLM, EncoderDecoder or RNNLM)."""
    if isinstance(model, EncoderDecoder):
        if decoder_start_id is None:
            raise ValueError("an encoder-decoder needs decoder_start_id (<s>, or <pad> for T5)")
        return Seq2SeqSession(model, prompt, use_cache=use_cache, decoder_start_id=decoder_start_id)
    if isinstance(model, CausalLM):
        return CausalSession(model, prompt, use_cache=use_cache)
    if isinstance(model, RNNLM):
        return RecurrentSession(model, prompt, use_cache=use_cache)
    names = [cls.__name__ for cls in SUPPORTED]
    raise ValueError(f"generate needs one of {names}, not {type(model).__name__}")
