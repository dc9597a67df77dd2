"""Sequence classification (Devlin et al. 2019, sec. 4.1; Radford et al. 2018, sec. 3.3): single
sentences or sentence pairs, `[CLS] A [SEP] (B [SEP])`, one label per example."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import bert_special_ids, pad_rows
from xfmr.objectives.contract import Objective
from xfmr.objectives.packing import pack

if TYPE_CHECKING:
    pass


class ClassificationObjective(Objective):
    """Args:
    pooling: "first" ([CLS], encoders), "last" (the last real token, decoders) or "mean".
    max_length: tokens kept per example, specials included.
    """

    name = "classification"
    # A pooled summary: [CLS] of an encoder, or the last token a causal decoder has seen.
    archs = ("encoder", "decoder")
    reads = "labelled"
    uses_labels = True
    by_perplexity = False
    loss_terms = ("examples",)  # a mean over examples; counts: the labels, one per example
    required_special_tokens = ("[PAD]", "[CLS]", "[SEP]")
    packs = True

    def __init__(self, *, pooling: str = "first", max_length: int = 128) -> None:
        self.pooling = pooling
        self.max_length = max_length
        self.label_names: list[str] = []
        self.pad_id = self.cls_id = self.sep_id = None

    def bind(self, tokenizer) -> None:
        self.pad_id, self.cls_id, self.sep_id = bert_special_ids(tokenizer)

    def bind_labels(self, label_names: list[str]) -> None:
        self.label_names = list(label_names)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.heads import SequenceClassification

        return SequenceClassification(config, n_classes=len(self.label_names), pooling=self.pooling)

    def metrics(self) -> dict[str, nn.Module]:
        return {"acc": MulticlassAccuracy(num_classes=len(self.label_names), average="micro")}

    def update_metrics(self, metrics: nn.ModuleDict, logits: torch.Tensor, batch: dict) -> None:
        metrics["acc"].update(logits.argmax(-1), batch["labels"])

    def encode(self, ids: list[int], pair: list[int] | None = None) -> list[int]:
        tokens = [self.cls_id, *ids, self.sep_id]
        if pair is not None:
            tokens += [*pair, self.sep_id]
        return tokens[: self.max_length]

    def collate(
        self, examples: list[tuple[list[int], list[int] | None, int]]
    ) -> dict[str, torch.Tensor]:
        """(text ids, pair ids or None, label index) -> padded `[CLS] A [SEP] (B [SEP])`."""
        rows = [self.encode(ids, pair) for ids, pair, _ in examples]
        input_ids, attention_mask = pad_rows(rows, self.pad_id)
        labels = torch.tensor([label for _, _, label in examples], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Sentences (or pairs) share rows; each label stays its example's."""
        keys = {"input_ids": self.pad_id, "attention_mask": 0}
        return pack(batch, [("attention_mask", "document_ids", keys)])

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        packed = {}
        if "document_ids" in batch:  # packed rows: one logit row per example all the same
            packed = dict(document_ids=batch["document_ids"], n_documents=batch["labels"].size(0))
        logits = model(batch["input_ids"], batch["attention_mask"], **packed)  # (B, n_classes)
        return {
            "examples": F.cross_entropy(logits.float(), batch["labels"], reduction="sum")
        }, logits
