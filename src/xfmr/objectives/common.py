"""What every objective uses: the label that does not count, the token-level loss (a sum, see
`xfmr.objectives.terms`), padding rows into a batch, and the ids BERT's inputs are built with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from xfmr.text.tokenizers import TextTokenizer

IGNORE_INDEX = -100


def token_loss_sum(
    logits: torch.Tensor, labels: torch.Tensor, *, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy summed over the tokens whose label is not IGNORE_INDEX; logits (B, T, V)."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
        label_smoothing=label_smoothing,
    )


def token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of each token (B, T), 0 where the label is IGNORE_INDEX; logits (B, T, V)."""
    losses = F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return losses.view(labels.shape)


def bert_special_ids(tokenizer: TextTokenizer) -> tuple[int, int, int]:
    """The ids of `[PAD]`, `[CLS]` and `[SEP]`: what BERT's inputs `[CLS] A [SEP] (B [SEP])`
    are built and padded with."""
    return tuple(tokenizer.token_to_id(token) for token in ("[PAD]", "[CLS]", "[SEP]"))


def encoder_decoder_logits(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits (B, T, V) of an encoder-decoder for a batch of source and shifted target ids."""
    return model(
        batch["input_ids"],
        batch["attention_mask"],
        batch["decoder_input_ids"],
        batch["decoder_attention_mask"],
    )


def pad_rows(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask
