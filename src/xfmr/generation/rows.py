"""The rows a search decodes: what must follow them when the search reorders or drops rows (the
model session, the n-gram history, the per-row samplers), and the bans every strategy applies to
their log-probs (eos before `min_new_tokens`, repeated n-grams)."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.generation.config import GenerationConfig
from xfmr.generation.processors import (
    NEG_INF,
    History,
    RowSampler,
    ban_padded_ids,
    ban_repeated_ngrams,
)
from xfmr.generation.sessions import Prompt, Session, open_session
from xfmr.nn.encoder_decoder import EncoderDecoder


class Rows:
    """What must follow the search's rows when it reorders or drops them: the model session,
    the n-gram history (None when n-grams are not banned) and the per-row samplers; and
    `vocab_size`, the ids that are tokens (the logits past it, a padded vocabulary's extra
    rows, come back -inf; None: every row is a token)."""

    def __init__(
        self,
        session: Session,
        history: History | None,
        sampler: RowSampler | None = None,
        *,
        vocab_size: int | None = None,
    ) -> None:
        self.session, self.history, self.sampler = session, history, sampler
        self.vocab_size = vocab_size

    def first_logits(self) -> torch.Tensor:
        """(N, V) next-token logits after the prompt / the decoder start token."""
        return ban_padded_ids(self.session.first_logits(), self.vocab_size)

    def reorder(self, index: torch.Tensor, *, same_sources: bool) -> None:
        self.session.reorder(index, same_sources=same_sources)
        if self.history is not None:
            self.history.reorder(index)
        if self.sampler is not None:
            self.sampler.reorder(index)

    def advance(self, chosen: torch.Tensor) -> torch.Tensor:
        """Feed the (N,) chosen tokens -> the next (N, V) logits."""
        if self.history is not None:
            self.history.append(chosen)
        return ban_padded_ids(self.session.next_logits(chosen), self.vocab_size)

    @classmethod
    def open(
        cls,
        model: nn.Module,
        prompt: Prompt,
        *,
        config: GenerationConfig,
        decoder_start_id: int | None,
        sampler: RowSampler | None = None,
        vocab_size: int | None = None,
    ) -> Rows:
        session = open_session(
            model, prompt, use_cache=config.use_cache, decoder_start_id=decoder_start_id
        )
        history = None
        if config.no_repeat_ngram_size:
            history = initial_history(model, prompt, decoder_start_id)
        return cls(session, history, sampler, vocab_size=vocab_size)


def initial_history(model: nn.Module, prompt: Prompt, decoder_start_id: int | None) -> History:
    """What the first new token follows: the prompt, or an encoder-decoder's start token."""
    if isinstance(model, EncoderDecoder):
        start = torch.full((len(prompt.rows), 1), decoder_start_id or 0, device=prompt.mask.device)
        return History(start, torch.ones_like(start))
    return History(*prompt.padded("left"))


def apply_bans(
    logprobs: torch.Tensor,
    step: int,
    history: History | None,
    config: GenerationConfig,
    eos_id: int | None,
) -> torch.Tensor:
    """Block eos before `min_new_tokens` and repeated n-grams, in place on (N, V) log-probs."""
    if eos_id is not None and step < config.min_new_tokens:
        logprobs[:, eos_id] = NEG_INF
    if history is not None:
        ban_repeated_ngrams(logprobs, history, config.no_repeat_ngram_size)
    return logprobs
