"""Sequence to sequence with teacher forcing and label smoothing (Vaswani et al. 2017, sec. 5.4):
the decoder reads the target shifted right behind <s> and predicts the target followed by </s>;
the loss is cross-entropy against (1 - a) * onehot + a / K, padding ignored."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.objectives.chunked_loss import checked_loss_chunk, chunked_token_terms
from xfmr.objectives.common import (
    IGNORE_INDEX,
    checked_z_loss,
    encoder_decoder_logits,
    pad_rows,
    seq2seq_sides,
    token_loss_sum,
    token_terms,
)
from xfmr.objectives.contract import Objective, TextTask
from xfmr.objectives.packing import pack


def smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Sum over counted tokens of -sum_k q_k log p_k with q = (1 - a) onehot + a / K."""
    return token_loss_sum(logits, labels, label_smoothing=smoothing)


class Seq2SeqObjective(Objective):
    """Source -> target pairs for an encoder-decoder.

    Args:
        label_smoothing: a in (1 - a) * onehot + a / K (the paper: 0.1).
        z_loss: PaLM's z-loss weight (`common.z_loss_sum`; PaLM: 1e-4), 0: off.
        loss_chunk: in training, the decoder's head and the loss `loss_chunk` tokens at a
            time (`xfmr.objectives.chunked_loss`), with no logits to return. None: whole.
    """

    name = "seq2seq"
    # Source -> target: an encoder reads the source, a decoder writes the target.
    archs = ("encoder_decoder",)
    reads = "pairs"
    required_special_tokens = ("<pad>", "<s>", "</s>")
    packs = True

    def __init__(
        self, *, label_smoothing: float = 0.1, z_loss: float = 0.0, loss_chunk: int | None = None
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"objective.label_smoothing={label_smoothing} must lie in [0, 1)")
        self.label_smoothing = label_smoothing
        self.z_loss = checked_z_loss(z_loss)
        self.loss_chunk = checked_loss_chunk(loss_chunk)
        self.pad_id = self.bos_id = self.eos_id = None

    def bind(self, tokenizer) -> None:
        self.pad_id = tokenizer.token_to_id("<pad>")
        self.bos_id = tokenizer.token_to_id("<s>")
        self.eos_id = tokenizer.token_to_id("</s>")

    def collate(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_rows([src + [self.eos_id] for src, _ in pairs], self.pad_id)
        decoder_input_ids, decoder_mask = pad_rows(
            [[self.bos_id, *tgt] for _, tgt in pairs], self.pad_id
        )
        labels, _ = pad_rows([[*tgt, self.eos_id] for _, tgt in pairs], self.pad_id)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_mask,
            "labels": labels.masked_fill(decoder_mask == 0, IGNORE_INDEX),
        }

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Pairs share rows: each source beside others in the encoder's row, its target in the
        decoder's row of the same index, attending across to its own source only."""
        return pack(batch, seq2seq_sides(self.pad_id))

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        smoothing = self.label_smoothing if model.training else 0.0  # validation: the true loss
        if self.loss_chunk is not None and torch.is_grad_enabled():
            hidden = encoder_decoder_logits(model, batch, head=False)
            chunk = dict(chunk=self.loss_chunk, z_loss=self.z_loss, label_smoothing=smoothing)
            return chunked_token_terms(hidden, model, batch["labels"], **chunk), None
        logits = encoder_decoder_logits(model, batch)
        terms = token_terms(logits, batch["labels"], label_smoothing=smoothing, z_loss=self.z_loss)
        return terms, logits

    def text_task(self, tokenizer) -> TextTask | None:
        """A source + </s> is read; the target is written from <s> up to </s>."""
        return TextTask(
            "translate",
            pad_id=self.pad_id,
            eos_id=self.eos_id,
            decoder_start_id=self.bos_id,
            source_suffix=(self.eos_id,),
            hidden_ids=frozenset(tokenizer.special_ids()),
        )
