"""Ancestral sampling from a causal LM, with temperature and top-k (no KV cache yet)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def sample(
    model: nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    max_context: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Extend `input_ids` (B, T) by `max_new_tokens` tokens; temperature 0 is greedy.

    `max_context` crops the context fed to the model (learned positions cannot see further).
    """
    ids = input_ids
    for _ in range(max_new_tokens):
        context = ids if max_context is None else ids[:, -max_context:]
        logits = model(context)[:, -1, :].float()  # (B, V)
        if temperature == 0:
            next_id = logits.argmax(dim=-1, keepdim=True)
        else:
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            next_id = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        ids = torch.cat([ids, next_id], dim=1)
    return ids
