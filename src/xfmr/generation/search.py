"""`generate`: greedy decoding, sampling and beam search over a CausalLM, an EncoderDecoder or an
RNNLM, batched, with a KV cache. Rows that finish leave the batch, so the rest run faster; each
row's result equals decoding it alone."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.generation.beam import beam_search
from xfmr.generation.config import GenerationConfig, Hypothesis
from xfmr.generation.processors import RowSampler, filter_top_k, filter_top_p
from xfmr.generation.rows import Rows, apply_bans
from xfmr.generation.sessions import Prompt
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.models import CausalLM


@torch.inference_mode()
def generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    config: GenerationConfig,
    eos_id: int | None,
    pad_id: int,
    decoder_start_id: int | None = None,
    max_positions: int | None = None,
    vocab_size: int | None = None,
) -> list[list[Hypothesis]]:
    """Decode every row of `input_ids` as `config` says.

    Args:
        model: a CausalLM (arch=decoder), EncoderDecoder or RNNLM; run in eval mode here.
        input_ids: (B, T) prompts (decoder, RNN) or sources (encoder-decoder).
        attention_mask: (B, T), 1 = real token; rows may have different lengths, padded on
            either side (each row's real tokens are laid out afresh). None: all real.
        config: strategy and its settings.
        eos_id: the token that ends a hypothesis; None: only max_new_tokens does.
        pad_id: the id written into pads.
        decoder_start_id: encoder-decoder only: the decoder's first input (<s>; <pad> for T5).
        max_positions: positions the model can take; None: its learned/sinusoidal table's size.
        vocab_size: the tokenizer's vocabulary: ids from it on (the rows a padded vocabulary
            adds, `model.vocab_multiple`) are never chosen. None: the model config's.

    Returns:
        Per input row, up to `config.n_best` hypotheses, best first.

    Raises:
        ValueError: a row without real tokens, a prompt that would outgrow the positions, a
            model of another kind, an encoder-decoder without decoder_start_id, or no
            `config.max_new_tokens` (a run's generation fits it: `xfmr.runs.inference`).
    """
    if config.max_new_tokens is None:
        raise ValueError("generation.max_new_tokens is not set: give the number of new tokens")
    prompt = _prompt(model, input_ids, attention_mask, pad_id)
    _check_positions(model, prompt, config.max_new_tokens, max_positions)
    search = beam_search if config.strategy == "beam" else greedy_or_sample
    if vocab_size is None:
        vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    was_training = model.training
    model.eval()
    try:
        return search(
            model,
            prompt,
            config=config,
            eos_id=eos_id,
            decoder_start_id=decoder_start_id,
            vocab_size=vocab_size,
        )
    finally:
        model.train(was_training)


def _prompt(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pad_id: int
) -> Prompt:
    """The rows of `input_ids` on the model's device, each holding at least one real token."""
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids must be (B, T) with an attention_mask of the same shape, got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    device = next(model.parameters()).device
    prompt = Prompt(input_ids.to(device), attention_mask.to(device), pad_id=pad_id)
    empty = (prompt.lengths == 0).nonzero()
    if len(empty):
        raise ValueError(f"row {int(empty[0])} of input_ids has no real token (attention_mask)")
    return prompt


def _check_positions(
    model: nn.Module, prompt: Prompt, max_new_tokens: int, max_positions: int | None
) -> None:
    """Every position the model is fed must exist. The last new token is never fed back, so a
    decoder needs prompt + max_new_tokens - 1 positions, an encoder-decoder's decoder (start
    token first) max_new_tokens, and its encoder the source's length."""
    longest = int(prompt.lengths.max())
    if isinstance(model, EncoderDecoder):
        stacks = [model.encoder, model.decoder]
        needs = [
            (longest, f"a source of {longest} tokens"),
            (max_new_tokens, f"max_new_tokens={max_new_tokens} (decoder start token first)"),
        ]
    elif isinstance(model, CausalLM):
        stacks = [model.backbone]
        count = longest + max_new_tokens - 1
        needs = [(count, f"a prompt of {longest} tokens and max_new_tokens={max_new_tokens}")]
    else:
        return  # an RNN has no positions
    tables = [getattr(stack.pos, "max_positions", None) for stack in stacks]
    limit = max_positions or min((t for t in tables if t), default=None)
    for count, what in needs:
        if limit is not None and count > limit:
            raise ValueError(f"{what} need {count} positions, but max_positions is {limit}")


def _warp(logprobs: torch.Tensor, config: GenerationConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p (Hugging Face's order) -> logits to sample from."""
    logits = logprobs / config.temperature
    if config.top_k is not None:
        logits = filter_top_k(logits, config.top_k)
    if config.top_p is not None and config.top_p < 1.0:
        logits = filter_top_p(logits, config.top_p)
    return logits


def _sampler(config: GenerationConfig, prompt: Prompt, copies: int) -> RowSampler:
    seed = config.seed if config.seed is not None else int(torch.randint(2**31, ()).item())
    seeds = [RowSampler.seed_for(seed, row, j) for row in prompt.rows for j in range(copies)]
    return RowSampler(seeds, prompt.mask.device)


def greedy_or_sample(
    model: nn.Module,
    prompt: Prompt,
    *,
    config: GenerationConfig,
    eos_id: int | None,
    decoder_start_id: int | None,
    vocab_size: int | None = None,
) -> list[list[Hypothesis]]:
    """One token per row per step: the most likely (greedy) or a draw (sample; `n_best`
    independent draws per row). A row leaves the batch when it emits eos."""
    B, copies, max_new = len(prompt.rows), config.n_best, config.max_new_tokens
    rows = Rows.open(
        model, prompt, config=config, decoder_start_id=decoder_start_id, vocab_size=vocab_size
    )
    logits = rows.first_logits()  # (B, V)
    if copies > 1:  # the prompt ran once; its copies start from the same cache
        expand = torch.arange(B, device=logits.device).repeat_interleave(copies)
        rows.reorder(expand, same_sources=False)
        logits = logits.index_select(0, expand)
    if config.strategy == "sample":
        rows.sampler = _sampler(config, prompt, copies)
    sampler = rows.sampler
    active = torch.arange(B * copies, device=logits.device)  # the rows the session holds
    tokens = torch.zeros(B * copies, max_new, dtype=torch.long, device=logits.device)
    scores = torch.zeros(B * copies, device=logits.device)
    lengths = torch.full_like(active, max_new)  # tokens before eos
    for step in range(max_new):
        logprobs = logits.float().log_softmax(dim=-1)  # (N, V)
        logprobs = apply_bans(logprobs, step, rows.history, config, eos_id)
        if sampler is None:
            chosen = logprobs.argmax(dim=-1)
        else:
            chosen = sampler.draw(_warp(logprobs, config))
        tokens[active, step] = chosen
        scores[active] += logprobs.gather(1, chosen[:, None])[:, 0]  # the model's log-prob
        running = torch.ones_like(chosen, dtype=torch.bool) if eos_id is None else chosen != eos_id
        lengths[active[~running]] = step
        if step + 1 == max_new or not running.any():
            break
        if not running.all():  # finished rows leave the batch
            keep = running.nonzero()[:, 0]
            rows.reorder(keep, same_sources=False)
            active, chosen = active[keep], chosen[keep]
        logits = rows.advance(chosen)
    return _ranked(tokens, scores, lengths, sources=B, copies=copies, max_new=max_new)


def _ranked(
    tokens: torch.Tensor,
    scores: torch.Tensor,
    lengths: torch.Tensor,
    *,
    sources: int,
    copies: int,
    max_new: int,
) -> list[list[Hypothesis]]:
    """(N, max_new) tokens, (N,) scores and lengths -> per source, its copies best first."""
    rows = [
        Hypothesis(tokens=t[:n].tolist(), score=s, finished=n < max_new)
        for t, s, n in zip(tokens, scores.tolist(), lengths.tolist(), strict=True)
    ]
    grouped = [rows[b * copies : (b + 1) * copies] for b in range(sources)]
    return [sorted(group, key=lambda h: -h.score) for group in grouped]
