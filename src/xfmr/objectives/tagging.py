"""Token tagging (NER, Devlin et al. 2019, sec. 5.3): one tag per word, `[CLS] pieces... [SEP]`
with each word tokenized on its own and its tag on its first piece; the other pieces, the
specials and the padding carry IGNORE_INDEX. Scored by entity-level precision, recall and F1
over words.

Packed (`data.packing`), sentences share rows, each attending within itself; the loss counts
the same tagged pieces, and the scores read each sentence's logits back in a row of its own
(`xfmr.objectives.unpacking`), so its words are scored as unpacked."""

from __future__ import annotations

import torch
from torch import nn

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import IGNORE_INDEX, bert_special_ids, pad_rows, token_loss_sum
from xfmr.objectives.contract import Objective
from xfmr.objectives.entity_f1 import NO_PREDICTION, SCORES, EntityF1
from xfmr.objectives.packing import pack
from xfmr.objectives.unpacking import unpack

# A word position past the end of the sentence, or a word whose first piece truncation cut.
NO_WORD_START = -1


def word_predictions(piece_predictions: torch.Tensor, word_starts: torch.Tensor) -> torch.Tensor:
    """Each word's prediction: the one on its first piece, NO_PREDICTION where it has none.

    piece_predictions: (B, T) label ids; word_starts: (B, W) positions, NO_WORD_START where none.
    """
    gathered = piece_predictions.gather(1, word_starts.clamp(min=0))  # (B, W)
    return gathered.masked_fill(word_starts == NO_WORD_START, NO_PREDICTION)


class TaggingObjective(Objective):
    """Args:
    max_length: pieces kept per sentence, [CLS] and [SEP] included; the words whose first piece
        falls beyond it are predicted "O" when scored, so recall counts them.
    """

    name = "tagging"
    # A tag per word on its first piece, which must already see the whole sentence: an encoder.
    archs = ("encoder",)
    reads = "tagged"
    uses_labels = True
    by_perplexity = False
    # [UNK] stands in for a word the tokenizer makes no pieces of, so every word keeps a tag.
    required_special_tokens = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")
    packs = True

    def __init__(self, *, max_length: int = 128) -> None:
        if max_length < 3:
            raise UserError(
                f"objective.max_length={max_length} is too short: [CLS], one piece and [SEP] "
                "need at least 3"
            )
        self.max_length = max_length
        self.label_names: list[str] = []
        self.pad_id = self.unk_id = self.cls_id = self.sep_id = None

    def bind(self, tokenizer) -> None:
        self.pad_id, self.cls_id, self.sep_id = bert_special_ids(tokenizer)
        self.unk_id = tokenizer.token_to_id("[UNK]")

    def bind_labels(self, label_names: list[str]) -> None:
        self.label_names = list(label_names)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.heads import TokenClassification

        return TokenClassification(config, n_labels=len(self.label_names))

    def metrics(self) -> dict[str, nn.Module]:
        return {score: EntityF1(self.label_names, score=score) for score in SCORES}

    def update_metrics(self, metrics: nn.ModuleDict, logits: torch.Tensor, batch: dict) -> None:
        if "document_ids" in batch:  # packed rows: each sentence's logits in a row of its own
            n = batch["word_starts"].size(0)
            logits = unpack(logits, batch["document_ids"], n, fill=0.0)  # (B, T, n_labels)
        predicted = word_predictions(logits.argmax(-1), batch["word_starts"])  # (B, W)
        for score in SCORES:
            metrics[score].update(predicted, batch["word_labels"])

    def encode(
        self, word_pieces: list[list[int]], labels: list[int]
    ) -> tuple[list[int], list[int], list[int]]:
        """One sentence -> (token ids, a label per token, each word's first-piece position)."""
        ids, token_labels, starts = [self.cls_id], [IGNORE_INDEX], []
        room = self.max_length - 1  # [SEP] always closes the sequence
        for pieces, label in zip(word_pieces, labels, strict=True):
            kept = (pieces or [self.unk_id])[: room - len(ids)]
            starts.append(len(ids) if kept else NO_WORD_START)
            ids += kept
            token_labels += [label, *[IGNORE_INDEX] * (len(kept) - 1)] if kept else []
        return [*ids, self.sep_id], [*token_labels, IGNORE_INDEX], starts

    def collate(self, examples: list[tuple[list[list[int]], list[int]]]) -> dict[str, torch.Tensor]:
        """(pieces of each word, label of each word) per sentence -> padded batch; `labels` per
        token for the loss, `word_starts` and `word_labels` (B, W) per word for the scores."""
        rows = [self.encode(pieces, labels) for pieces, labels in examples]
        input_ids, attention_mask = pad_rows([ids for ids, _, _ in rows], self.pad_id)
        token_labels, _ = pad_rows([labels for _, labels, _ in rows], IGNORE_INDEX)
        word_starts, _ = pad_rows([starts for _, _, starts in rows], NO_WORD_START)
        word_labels, _ = pad_rows([labels for _, labels in examples], IGNORE_INDEX)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": token_labels,
            "word_starts": word_starts,
            "word_labels": word_labels,
        }

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Sentences share rows with their pieces' labels; `word_starts` and `word_labels`
        stay each sentence's own, for the scores."""
        keys = {"input_ids": self.pad_id, "attention_mask": 0, "labels": IGNORE_INDEX}
        return pack(batch, [("attention_mask", "document_ids", keys)])

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(the loss summed over tagged pieces, logits (R, T, n_labels), R rows: packed or not)."""
        packed = {"document_ids": batch["document_ids"]} if "document_ids" in batch else {}
        logits = model(batch["input_ids"], batch["attention_mask"], **packed)  # (R, T, n_labels)
        return {"tokens": token_loss_sum(logits, batch["labels"])}, logits
