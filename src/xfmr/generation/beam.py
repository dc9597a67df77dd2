"""Beam search (Sutskever et al. 2014; length penalty: Wu et al. 2016), batched: B sources x
num_beams rows run in one forward pass, the search itself stays in tensors.

Each step, for each source, the num_beams x V continuations are ranked by summed log-prob and
the best 2 * num_beams kept (so that num_beams of them can continue even if every beam ends).
Among the best num_beams, those ending in eos (or every one at max_new_tokens) join the source's
pool of finished hypotheses, ranked by their length-penalised score; the best num_beams that do
not end in eos are the next beams. This is Hugging Face's `_beam_search`, step for step, with its
early_stopping=True ("done once num_beams hypotheses have finished") or, for early_stopping=False,
its exact bound (HF's "never"). A source that is done leaves the batch.
"""

from __future__ import annotations

import torch
from torch import nn

from xfmr.generation.config import GenerationConfig, Hypothesis
from xfmr.generation.processors import NEG_INF, length_penalty
from xfmr.generation.rows import Rows, apply_bans
from xfmr.generation.sessions import Prompt


class FinishedPool:
    """Each source's best `size` finished hypotheses so far, by length-penalised score.

    scores: (B, size), -inf for an empty slot; tokens: (B, size, max_new); lengths (tokens
    before eos) and finished (ended with eos): (B, size).
    """

    def __init__(self, sources: int, size: int, max_new: int, device: torch.device) -> None:
        self.scores = torch.full((sources, size), NEG_INF, device=device)
        self.tokens = torch.zeros(sources, size, max_new, dtype=torch.long, device=device)
        self.lengths = torch.zeros(sources, size, dtype=torch.long, device=device)
        self.finished = torch.zeros(sources, size, dtype=torch.bool, device=device)

    def add(self, sources: torch.Tensor, **candidates: torch.Tensor) -> None:
        """Merge (Ba, C) candidates (-inf score = not finishing) into the pools of `sources`."""
        size = self.scores.size(1)
        merged = {
            name: torch.cat([getattr(self, name)[sources], candidates[name]], dim=1)
            for name in ("scores", "tokens", "lengths", "finished")
        }
        best = merged["scores"].topk(size, dim=1).indices  # (Ba, size)
        for name, values in merged.items():
            index = best if values.dim() == 2 else best[..., None].expand(-1, -1, values.size(2))
            getattr(self, name)[sources] = values.gather(1, index)

    def full(self, sources: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(self.scores[sources]).all(dim=1)  # (Ba,)

    def hypotheses(self, source: int, n_best: int) -> list[Hypothesis]:
        return [
            Hypothesis(tokens=self.tokens[source, k, :n].tolist(), score=s, finished=f)
            for k, (s, n, f) in enumerate(
                zip(
                    self.scores[source].tolist(),
                    self.lengths[source].tolist(),
                    self.finished[source].tolist(),
                    strict=True,
                )
            )
            if k < n_best and s != NEG_INF
        ]


class Beams:
    """The running beams of the sources still searched: scores (Ba, K) summed log-probs, tokens
    (Ba, K, max_new), sources (Ba,) their input rows. Session rows are source-major: a source's
    beam k is row position * K + k."""

    def __init__(self, sources: int, size: int, max_new: int, device: torch.device) -> None:
        self.scores = torch.zeros(sources, size, device=device)
        self.scores[:, 1:] = NEG_INF  # the beams start identical: only the first may expand
        self.tokens = torch.zeros(sources, size, max_new, dtype=torch.long, device=device)
        self.sources = torch.arange(sources, device=device)


def beam_search(
    model: nn.Module,
    prompt: Prompt,
    *,
    config: GenerationConfig,
    eos_id: int | None,
    decoder_start_id: int | None,
    vocab_size: int | None = None,
) -> list[list[Hypothesis]]:
    """Beam search over every row of `prompt`; per row, its `n_best` finished hypotheses
    (ids from `vocab_size` on, a padded vocabulary's extra rows, never chosen)."""
    B, K, max_new = len(prompt.rows), config.num_beams, config.max_new_tokens
    rows = Rows.open(
        model, prompt, config=config, decoder_start_id=decoder_start_id, vocab_size=vocab_size
    )
    logits = rows.first_logits()  # (B, V): the prompt runs once per source
    expand = torch.arange(B, device=logits.device).repeat_interleave(K)
    rows.reorder(expand, same_sources=False)
    logits = logits.index_select(0, expand)  # (B * K, V)
    beams = Beams(B, K, max_new, logits.device)
    pool = FinishedPool(B, K, max_new, logits.device)
    for step in range(max_new):
        logprobs = logits.float().log_softmax(dim=-1)  # (Ba * K, V)
        logprobs = apply_bans(logprobs, step, rows.history, config, eos_id)
        parents, chosen, done = _advance(beams, pool, logprobs, step, config=config, eos_id=eos_id)
        if step + 1 == max_new or bool(done.all()):
            break
        keep = (~done).nonzero()[:, 0]  # positions of the sources still searched
        session_rows = (keep[:, None] * K + parents[keep]).flatten()  # (Ba' * K,)
        rows.reorder(session_rows, same_sources=len(keep) == len(done))
        beams.scores, beams.tokens = beams.scores[keep], beams.tokens[keep]
        beams.sources = beams.sources[keep]
        logits = rows.advance(chosen[keep].flatten())
    return [pool.hypotheses(b, config.n_best) for b in range(B)]


def _advance(
    beams: Beams,
    pool: FinishedPool,
    logprobs: torch.Tensor,
    step: int,
    *,
    config: GenerationConfig,
    eos_id: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step for every searched source: finished candidates join the pool, the best
    continuing ones become the beams. Returns (Ba, K) parent beams and chosen tokens, and (Ba,)
    whether each source is done."""
    Ba, K = beams.scores.shape
    V = logprobs.size(-1)
    candidates = (beams.scores.reshape(-1, 1) + logprobs).view(Ba, K * V)
    top_scores, top_index = candidates.topk(min(2 * K, K * V), dim=1)  # (Ba, C), best first
    parents, tokens = top_index // V, top_index % V  # (Ba, C) each
    ends = tokens == eos_id if eos_id is not None else torch.zeros_like(tokens, dtype=torch.bool)
    sequences = beams.tokens.gather(1, parents[..., None].expand(-1, -1, beams.tokens.size(2)))
    sequences[:, :, step] = tokens  # (Ba, C, max_new)
    last = step + 1 == config.max_new_tokens
    in_top = torch.arange(top_scores.size(1), device=top_scores.device) < K  # HF: best K only
    finishing = in_top & (ends | last) & torch.isfinite(top_scores)
    penalty = length_penalty(step + 1, alpha=config.length_penalty, form=config.length_penalty_form)
    pool.add(
        beams.sources,
        scores=(top_scores / penalty).masked_fill(~finishing, NEG_INF),
        tokens=sequences,
        lengths=torch.where(ends, step, step + 1),
        finished=ends,
    )
    next_scores, pick = top_scores.masked_fill(ends, NEG_INF).topk(K, dim=1)  # (Ba, K)
    beams.scores = next_scores
    beams.tokens = sequences.gather(1, pick[..., None].expand(-1, -1, sequences.size(2)))
    return parents.gather(1, pick), tokens.gather(1, pick), _done(beams, pool, step, config)


def _done(beams: Beams, pool: FinishedPool, step: int, config: GenerationConfig) -> torch.Tensor:
    """(Ba,) sources whose pool is full and, without early stopping, whose best running beam
    cannot beat the pool's worst at any length still reachable (log-probs only fall, so the
    running sum is an upper bound; the largest penalty divisor ahead makes it the tightest)."""
    full = pool.full(beams.sources)
    if config.early_stopping:
        return full
    reachable = torch.tensor([step + 2, config.max_new_tokens], device=beams.scores.device)
    divisor = length_penalty(
        reachable, alpha=config.length_penalty, form=config.length_penalty_form
    ).max()
    best_possible = beams.scores[:, 0] / divisor
    return full & (best_possible <= pool.scores[beams.sources].min(dim=1).values)
