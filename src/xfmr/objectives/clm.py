"""Causal language modelling: predict token t+1 from tokens <= t (Radford et al. 2018)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xfmr.objectives.archs import OBJECTIVE_ARCHS

IGNORE_INDEX = -100


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the tokens whose label is not IGNORE_INDEX; logits (B, T, V)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX
    )


class CausalLMObjective:
    """Turns blocks of `T + 1` tokens into (inputs, targets shifted by one) and scores logits.

    Args:
        pad_id: token id that never counts in the loss (None when blocks are never padded).
    """

    name = "clm"
    supported_archs = OBJECTIVE_ARCHS["CausalLMObjective"]

    def __init__(self, *, pad_id: int | None = None) -> None:
        self.pad_id = pad_id

    required_special_tokens: tuple[str, ...] = ()

    def bind(self, tokenizer) -> None:
        """Nothing to take from the tokenizer: blocks of text are never padded."""

    def collate(self, blocks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = torch.stack(blocks)  # (B, T + 1)
        labels = ids[:, 1:].clone()
        if self.pad_id is not None:
            labels[labels == self.pad_id] = IGNORE_INDEX
        return {"input_ids": ids[:, :-1], "labels": labels}

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (mean loss over counted tokens, logits (B, T, V))."""
        logits = model(batch["input_ids"], batch.get("attention_mask"))
        loss = token_loss(logits, batch["labels"])
        return loss, logits
