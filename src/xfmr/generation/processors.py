"""What shapes a step's next-token distribution: bans (eos before `min_new_tokens`, repeated
n-grams), sampling filters (temperature, top-k, top-p) with per-row random streams, and the
length penalty that ranks beam hypotheses. Pure functions on (N, V) tensors, one row per
sequence being decoded."""

from __future__ import annotations

import zlib

import torch

NEG_INF = float("-inf")


class History:
    """The tokens each row's next token follows, for n-gram bans: the prompt (or the decoder
    start token), left-padded, then everything generated. ids and mask are (N, L)."""

    def __init__(self, ids: torch.Tensor, mask: torch.Tensor) -> None:
        self.ids, self.mask = ids, mask.bool()

    def append(self, tokens: torch.Tensor) -> None:
        """tokens: (N,) just chosen."""
        self.ids = torch.cat([self.ids, tokens[:, None]], dim=1)
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)

    def reorder(self, index: torch.Tensor) -> None:
        self.ids, self.mask = self.ids.index_select(0, index), self.mask.index_select(0, index)


def ban_repeated_ngrams(logprobs: torch.Tensor, history: History, size: int) -> torch.Tensor:
    """Set to -inf every token that would complete an n-gram of `size` already in the row's
    history (as Hugging Face's `no_repeat_ngram_size`, but pads never form n-grams).

    logprobs: (N, V), changed in place and returned.
    """
    ids, mask = history.ids, history.mask
    if ids.size(1) < size:
        return logprobs
    if size == 1:  # no token may appear twice
        banned = torch.zeros_like(logprobs).scatter_add_(1, ids, mask.to(logprobs.dtype)) > 0
        return logprobs.masked_fill_(banned, NEG_INF)
    windows = ids.unfold(1, size, 1)  # (N, W, size), W = L - size + 1
    real = mask.unfold(1, size, 1).all(dim=-1)  # (N, W): no pad inside the window
    prefix = ids[:, None, -(size - 1) :]  # (N, 1, size - 1): the last size - 1 tokens
    prefix_real = mask[:, -(size - 1) :].all(dim=-1, keepdim=True)  # (N, 1)
    match = (windows[..., :-1] == prefix).all(dim=-1) & real & prefix_real  # (N, W)
    counts = torch.zeros_like(logprobs).scatter_add_(1, windows[..., -1], match.to(logprobs.dtype))
    return logprobs.masked_fill_(counts > 0, NEG_INF)


def ban_padded_ids(logits: torch.Tensor, vocab_size: int | None) -> torch.Tensor:
    """Set to -inf the ids from `vocab_size` on: the rows a padded vocabulary adds to the LM
    head (`model.vocab_multiple`), which are no token. logits: (N, V), changed in place and
    returned; untouched where V <= vocab_size or vocab_size is None."""
    if vocab_size is not None and logits.size(-1) > vocab_size:
        logits[:, vocab_size:] = NEG_INF
    return logits


def filter_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits per row (ties at the k-th all stay), the rest -inf."""
    kth = torch.topk(logits, min(k, logits.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
    return logits.masked_fill(logits < kth, NEG_INF)


def filter_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020): keep the most likely tokens until their
    probability reaches p (at least one), the rest -inf."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (N, V): mass of the more likely tokens
    drop_sorted = mass_before >= p  # the first token has mass_before 0 < p: always kept
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, NEG_INF)


def length_penalty(lengths: torch.Tensor | int, *, alpha: float, form: str) -> torch.Tensor:
    """The divisor of a beam hypothesis's summed log-prob: L**alpha ("average") or
    ((5 + L) / 6)**alpha ("gnmt", Wu et al. 2016, eq. 14); L counts generated tokens with eos."""
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    base = lengths if form == "average" else (5.0 + lengths) / 6.0
    return base**alpha


class RowSampler:
    """Draws one token per row, each row from its own random stream, so a row's samples do not
    depend on the other rows in the batch. A stream's seed comes from the run's seed, the row's
    input tokens and which of the row's samples it is.

    Uses the exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) draws i with probability
    p_i, and never a token whose probability is 0.
    """

    def __init__(self, seeds: list[int], device: torch.device) -> None:
        self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]

    @staticmethod
    def seed_for(seed: int, input_tokens: list[int], sample: int) -> int:
        return zlib.crc32(f"{seed}|{sample}|{input_tokens}".encode())

    def draw(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (N, V) after temperature and filters -> token ids (N,)."""
        probs = logits.float().softmax(dim=-1)  # (N, V)
        race = torch.stack(
            [torch.empty_like(probs[0]).exponential_(generator=g) for g in self.generators]
        )  # (N, V)
        return (probs / race).argmax(dim=-1)

    def reorder(self, index: torch.Tensor) -> None:
        self.generators = [self.generators[i] for i in index.tolist()]
