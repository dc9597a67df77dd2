"""What every objective uses: the label that does not count, the token-level loss (a sum, see
`xfmr.objectives.terms`) and PaLM's z-loss beside it, padding rows into a batch, and the ids
BERT's inputs are built with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from xfmr.text.tokenizers import TextTokenizer

IGNORE_INDEX = -100
# The loss term of PaLM's z-loss (`token_terms`), beside the cross-entropy's.
Z_LOSS = "z_loss"


def token_loss_sum(
    logits: torch.Tensor, labels: torch.Tensor, *, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy summed over the tokens whose label is not IGNORE_INDEX; logits (B, T, V)."""
    return _cross_entropy_sum(logits.flatten(0, 1).float(), labels.flatten(), label_smoothing)


def _cross_entropy_sum(
    scores: torch.Tensor, labels: torch.Tensor, smoothing: float
) -> torch.Tensor:
    """scores (N, V) float, labels (N,)."""
    return F.cross_entropy(
        scores, labels, ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=smoothing
    )


def checked_z_loss(z_loss: float) -> float:
    """`objective.z_loss` as an objective's constructor takes it: a weight >= 0."""
    if not z_loss >= 0:  # NaN too
        raise ValueError(f"objective.z_loss={z_loss} must be >= 0 (0: off; PaLM used 1e-4)")
    return float(z_loss)


def z_loss_sum(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """PaLM's z-loss, unweighted (Chowdhery et al. 2022, sec. 5): log(Z)^2 summed over the
    tokens whose label is not IGNORE_INDEX, Z = sum_k exp(score_k) the softmax's normaliser,
    which the loss keeps near 1 (log Z near 0); scores (N, V), labels (N,)."""
    log_z = torch.logsumexp(scores.float(), dim=-1)  # (N,)
    return log_z.square().masked_fill(labels == IGNORE_INDEX, 0.0).sum()


def token_terms(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    term: str = "tokens",
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
) -> dict[str, torch.Tensor]:
    """The token cross-entropy's sum as loss term `term`, and with `z_loss` > 0 the term Z_LOSS:
    z_loss * `z_loss_sum` over the same tokens (counted as `term` is: `Objective.counts`), an
    auxiliary term that training optimises and the reported loss leaves out
    (`xfmr.objectives.terms`). With z_loss = 0 the cross-entropy alone, as `token_loss_sum`
    gives it. logits (B, T, V)."""
    if not z_loss:
        return {term: token_loss_sum(logits, labels, label_smoothing=label_smoothing)}
    scores, flat = logits.flatten(0, 1).float(), labels.flatten()  # one float copy for both
    return {
        term: _cross_entropy_sum(scores, flat, label_smoothing),
        Z_LOSS: z_loss * z_loss_sum(scores, flat),
    }


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


def encoder_decoder_logits(
    model: nn.Module, batch: dict[str, torch.Tensor], *, head: bool = True
) -> torch.Tensor:
    """Logits (B, T, V) of an encoder-decoder for a batch of source and shifted target ids
    (packed rows: with their document ids, `seq2seq_sides`); with head=False, the decoder's last
    hidden states (B, T, C) instead (`EncoderDecoder.decode`)."""
    packed: dict[str, Any] = {"head": False} if not head else {}
    if "document_ids" in batch:
        packed.update(
            document_ids=batch["document_ids"], decoder_document_ids=batch["decoder_document_ids"]
        )
    return model(
        batch["input_ids"],
        batch["attention_mask"],
        batch["decoder_input_ids"],
        batch["decoder_attention_mask"],
        **packed,
    )


def seq2seq_sides(pad_id: int) -> list[tuple[str, str, dict[str, int]]]:
    """The two sides an encoder-decoder's batch packs (`xfmr.objectives.packing.pack`)."""
    return [
        ("attention_mask", "document_ids", {"input_ids": pad_id, "attention_mask": 0}),
        (
            "decoder_attention_mask",
            "decoder_document_ids",
            {"decoder_input_ids": pad_id, "decoder_attention_mask": 0, "labels": IGNORE_INDEX},
        ),
    ]


def pad_rows(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask
