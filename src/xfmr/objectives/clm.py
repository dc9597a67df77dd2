"""Causal language modelling: predict token t+1 from tokens <= t (Radford et al. 2018)."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.objectives.chunked_loss import checked_loss_chunk, chunked_token_terms
from xfmr.objectives.common import IGNORE_INDEX, checked_z_loss, token_terms
from xfmr.objectives.contract import Objective, TextTask, padding_id
from xfmr.objectives.packing import packed_text, text_blocks


class CausalLMObjective(Objective):
    """Turns blocks of `T + 1` tokens into (inputs, targets shifted by one) and scores logits.

    Args:
        pad_id: token id that never counts in the loss (None when blocks are never padded).
        z_loss: PaLM's z-loss weight (`common.z_loss_sum`; PaLM: 1e-4), 0: off.
        loss_chunk: in training, the head and the loss `loss_chunk` tokens at a time, never
            holding the logits of the whole batch (`xfmr.objectives.chunked_loss`); the
            training step then has no logits to return. None: the logits whole.
    """

    name = "clm"
    # Next-token prediction needs a model that cannot see the future: a causal decoder or an RNN.
    archs = ("decoder", "rnn")
    reads = "text"
    packs = True  # blocks of documents (data.packing): see `collate`

    def __init__(
        self, *, pad_id: int | None = None, z_loss: float = 0.0, loss_chunk: int | None = None
    ) -> None:
        self.pad_id = pad_id
        self.z_loss = checked_z_loss(z_loss)
        self.loss_chunk = checked_loss_chunk(loss_chunk)

    def bind(self, tokenizer) -> None:
        """Nothing to take from the tokenizer: blocks of text are never padded."""

    def collate(self, blocks: list) -> dict[str, torch.Tensor]:
        """Blocks (T + 1 ids each) -> inputs and the next tokens. Packed blocks (ids and
        their documents, `data.packing`) keep `document_ids` (B, T), and the last token of a
        document predicts nothing: its next token starts another (IGNORE_INDEX, as padding)."""
        ids, documents = text_blocks(blocks)  # (B, T + 1) each
        labels = ids[:, 1:].clone()
        if self.pad_id is not None:
            labels[labels == self.pad_id] = IGNORE_INDEX
        batch = {"input_ids": ids[:, :-1], "labels": labels}
        if documents is not None:
            labels[documents[:, 1:] != documents[:, :-1]] = IGNORE_INDEX
            batch["document_ids"] = documents[:, :-1]
        return batch

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return packed_text(batch)

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Returns (the loss summed over counted tokens, logits (B, T, V)); with `loss_chunk`,
        where gradients are being recorded, (the loss, None)."""
        packed = {"document_ids": batch["document_ids"]} if "document_ids" in batch else {}
        inputs = (batch["input_ids"], batch.get("attention_mask"))
        if self.loss_chunk is not None and torch.is_grad_enabled():
            hidden = model(*inputs, head=False, **packed)
            chunk = dict(chunk=self.loss_chunk, z_loss=self.z_loss)
            return chunked_token_terms(hidden, model, batch["labels"], **chunk), None
        logits = model(*inputs, **packed)
        return token_terms(logits, batch["labels"], z_loss=self.z_loss), logits

    def text_task(self, tokenizer) -> TextTask | None:
        """A prompt is continued. Blocks of running text carry no </s>: only
        generation.max_new_tokens ends a continuation."""
        return TextTask("continue", pad_id=padding_id(tokenizer))
