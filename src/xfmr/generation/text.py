"""Long continuations of one prompt past the model's context, for a quick look at what a
language model learned (the text sample printed after training)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from xfmr.generation.config import GenerationConfig
from xfmr.generation.search import generate


def sample_text(
    model: nn.Module,
    prompt: list[int],
    *,
    max_new_tokens: int,
    config: GenerationConfig,
    max_context: int | None = None,
    pad_id: int = 0,
    vocab_size: int | None = None,
) -> list[int]:
    """`prompt` followed by `max_new_tokens` generated ids (no eos ends it), each below
    `vocab_size` (the tokenizer's; None: the model config's), as `generate` chooses them.

    With `max_context`, the model never sees more than that many tokens: generation runs in
    windows (a KV cache within each), each after the first starting from the last half of the
    text so far, so a model with learned positions can continue past its table.
    """
    if not prompt:
        raise ValueError("sample_text needs at least one prompt token")
    ids, remaining, window = list(prompt), max_new_tokens, 0
    device = next(model.parameters()).device
    while remaining > 0:
        if max_context is None or len(ids) <= max_context:
            context = ids
        else:
            context = ids[-max(1, max_context // 2) :]
        room = remaining if max_context is None else max_context - len(context) + 1
        seed = None if config.seed is None else config.seed + window
        step_config = dataclasses.replace(
            config, max_new_tokens=min(remaining, room), min_new_tokens=0, n_best=1, seed=seed
        )
        inputs = torch.tensor([context], device=device)
        best = generate(
            model,
            inputs,
            config=step_config,
            eos_id=None,
            pad_id=pad_id,
            max_positions=max_context,
            vocab_size=vocab_size,
        )[0][0]
        ids += best.tokens
        remaining -= len(best.tokens)
        window += 1
    return ids
