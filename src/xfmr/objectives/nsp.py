"""Next-sentence prediction (Devlin et al. 2019, sec. 3.1): `[CLS] A [SEP] B [SEP]`, segment 0
for `[CLS] A [SEP]` and 1 for `B [SEP]`; is B the sentence that follows A? Together with masked
LM on the same inputs it is BERT's pre-training loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import (
    IGNORE_INDEX,
    bert_special_ids,
    checked_z_loss,
    pad_rows,
    token_terms,
)
from xfmr.objectives.contract import Objective, TextTask, z_loss_term
from xfmr.objectives.mlm import TokenMasker, fill_masks
from xfmr.objectives.packing import pack


def truncate_pair(a: list[int], b: list[int], *, budget: int) -> tuple[list[int], list[int]]:
    """Drop the last token of the longer of A and B (B on a tie) until both fit in `budget`
    tokens, as BERT's `truncate_seq_pair` does (it drops from either end at random)."""
    keep_a, keep_b = len(a), len(b)
    while keep_a + keep_b > budget:
        if keep_a > keep_b:
            keep_a -= 1
        else:
            keep_b -= 1
    return a[:keep_a], b[:keep_b]


def sentence_pair_inputs(
    examples: list[tuple[list[int], list[int], int]],
    *,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    max_length: int,
) -> dict[str, torch.Tensor]:
    """(A ids, B ids, label) examples -> padded `[CLS] A [SEP] B [SEP]` with segment ids 0 for
    `[CLS] A [SEP]`, 1 for `B [SEP]` (and 0 on padding), and the labels (B,)."""
    rows, segments = [], []
    for a, b, _ in examples:
        a, b = truncate_pair(a, b, budget=max_length - 3)
        rows.append([cls_id, *a, sep_id, *b, sep_id])
        segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    input_ids, attention_mask = pad_rows(rows, pad_id)
    token_type_ids, _ = pad_rows(segments, 0)
    labels = torch.tensor([label for _, _, label in examples], dtype=torch.long)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
        "labels": labels,
    }


def _check_segments(objective: NextSentenceObjective, config: ModelConfig) -> None:
    """The model has the segment embeddings sentences A and B need (also for init_from=hf:...)."""
    needed = objective.segments
    if config.type_vocab_size < needed:
        raise UserError(
            f"objective={objective.name} puts sentences A and B in segments 0 and 1: it needs "
            f"model.type_vocab_size >= {needed}, not {config.type_vocab_size}"
        )


class NextSentenceObjective(Objective):
    """Next-sentence prediction alone, on `EncoderNextSentence`: BERT's encoder, pooler and
    two-way classifier, named as in `EncoderPretraining` so weights move to and from
    objective=mlm_nsp runs, without the MLM head whose vocabulary projection NSP would compute
    for nothing. Examples come from data=documents.

    Args:
        max_length: tokens per pair, specials included; the longer sentence is cut first.
    """

    name = "nsp"
    # BERT's pre-training: [CLS] reads both sentences, in segments 0 and 1.
    archs = ("encoder",)
    reads = "documents"
    segments = 2
    by_perplexity = False
    loss_terms: tuple[str, ...] = ("pairs",)  # a mean over sentence pairs: one label each
    packs = True  # sentence pairs share rows (data.packing): see `pack`
    required_special_tokens: tuple[str, ...] = ("[PAD]", "[CLS]", "[SEP]")

    def __init__(self, *, max_length: int = 128) -> None:
        if max_length < 5:
            raise ValueError(
                f"objective.max_length={max_length} must be >= 5: [CLS] A [SEP] B [SEP] with a "
                f"token of each sentence"
            )
        self.max_length = max_length
        self.pad_id = self.cls_id = self.sep_id = None

    def bind(self, tokenizer) -> None:
        self.pad_id, self.cls_id, self.sep_id = bert_special_ids(tokenizer)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.heads import EncoderNextSentence

        _check_segments(self, config)
        return EncoderNextSentence(config)

    def metrics(self) -> dict[str, nn.Module]:
        return {"nsp_acc": MulticlassAccuracy(num_classes=2, average="micro")}

    def update_metrics(self, metrics: nn.ModuleDict, logits: torch.Tensor, batch: dict) -> None:
        metrics["nsp_acc"].update(logits.argmax(-1), batch["labels"])

    def collate(self, examples: list[tuple[list[int], list[int], int]]) -> dict[str, torch.Tensor]:
        return sentence_pair_inputs(
            examples,
            cls_id=self.cls_id,
            sep_id=self.sep_id,
            pad_id=self.pad_id,
            max_length=self.max_length,
        )

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Pairs share rows with their segments; each pair's label stays its own, one per
        pair."""
        keys = {"input_ids": self.pad_id, "attention_mask": 0, "token_type_ids": 0}
        return pack(batch, [("attention_mask", "document_ids", keys)])

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        packed = {}
        if "document_ids" in batch:  # packed rows: one logit row per pair, in pair order
            packed = dict(document_ids=batch["document_ids"], n_documents=batch["labels"].size(0))
        logits = model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **packed
        )
        loss = F.cross_entropy(logits.float(), batch["labels"], reduction="sum")
        return {"pairs": loss}, logits  # logits (B, 2), packed: (pairs, 2)


class MaskedLMNextSentenceObjective(NextSentenceObjective):
    """BERT's pre-training (Devlin et al. 2019, sec. 3.1, appendix A.2): masked LM on the
    sentence pairs plus next-sentence prediction, loss = MLM + NSP, on `EncoderPretraining`.

    The batch's `labels` are the MLM targets (B, T) and `next_sentence_label` the NSP ones (B,).

    Packed (`data.packing`), pairs share rows, each attending within itself, its positions and
    segments as unpacked; its tokens are masked before packing (`collate`, then `pack`), so the
    same draws mask the same tokens, and its NSP logits come from its own [CLS].

    Args:
        max_length: tokens per pair, specials included; the longer sentence is cut first.
        select_rate, mask_rate, random_rate, whole_word: see `xfmr.objectives.mlm.TokenMasker`.
        z_loss: PaLM's z-loss weight on the MLM logits (`common.z_loss_sum`; PaLM: 1e-4), 0: off.
    """

    name = "mlm_nsp"
    # Masked tokens from both sides, and [CLS] reading both sentences.
    archs = ("encoder",)
    reads = "documents"
    segments = 2
    by_perplexity = False
    # MLM's mean over the masked tokens plus NSP's over the pairs, each over its own count.
    loss_terms = ("mlm", "nsp")
    required_special_tokens = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
    packs = True  # sentence pairs share rows (data.packing): see `pack`

    def __init__(
        self,
        *,
        max_length: int = 128,
        select_rate: float = 0.15,
        mask_rate: float = 0.8,
        random_rate: float = 0.1,
        whole_word: bool = False,
        z_loss: float = 0.0,
    ) -> None:
        super().__init__(max_length=max_length)
        self.z_loss = checked_z_loss(z_loss)
        self.masker = TokenMasker(
            select_rate=select_rate,
            mask_rate=mask_rate,
            random_rate=random_rate,
            whole_word=whole_word,
        )

    def bind(self, tokenizer) -> None:
        super().bind(tokenizer)
        self.masker.bind(tokenizer)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.heads import EncoderPretraining

        _check_segments(self, config)
        return EncoderPretraining(config)

    def metrics(self) -> dict[str, nn.Module]:
        return {
            "nsp_acc": MulticlassAccuracy(num_classes=2, average="micro"),
            "mlm_ppl": Perplexity(ignore_index=IGNORE_INDEX),
        }

    def update_metrics(
        self, metrics: nn.ModuleDict, logits: tuple[torch.Tensor, torch.Tensor], batch: dict
    ) -> None:
        mlm_logits, nsp_logits = logits
        metrics["nsp_acc"].update(nsp_logits.argmax(-1), batch["next_sentence_label"])
        metrics["mlm_ppl"].update(mlm_logits.float(), batch["labels"])

    def collate(self, examples: list[tuple[list[int], list[int], int]]) -> dict[str, torch.Tensor]:
        batch = super().collate(examples)
        batch["next_sentence_label"] = batch["labels"]
        batch["input_ids"], batch["labels"] = self.masker(batch["input_ids"])
        return batch

    def pack(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Pairs share rows with their segments and masked-LM labels (masked per pair in
        `collate`); each pair's `next_sentence_label` stays its own, one per pair."""
        keys = {
            "input_ids": self.pad_id,
            "attention_mask": 0,
            "token_type_ids": 0,
            "labels": IGNORE_INDEX,
        }
        return pack(batch, [("attention_mask", "document_ids", keys)])

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        nsp_labels = batch["next_sentence_label"]
        counts = {
            "mlm": (batch["labels"] != IGNORE_INDEX).sum(),
            "nsp": (nsp_labels != IGNORE_INDEX).sum(),
        }
        return z_loss_term(counts, self.z_loss, of="mlm")

    def forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        packed = {}
        if "document_ids" in batch:  # packed rows: one NSP logit row per pair, in pair order
            n_pairs = batch["next_sentence_label"].size(0)
            packed = dict(document_ids=batch["document_ids"], n_documents=n_pairs)
        mlm_logits, nsp_logits = model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **packed
        )  # (B, T, V) (packed: (R, T, V)), (B, 2)
        nsp = F.cross_entropy(nsp_logits.float(), batch["next_sentence_label"], reduction="sum")
        mlm = token_terms(mlm_logits, batch["labels"], term="mlm", z_loss=self.z_loss)
        sums = {**mlm, "nsp": nsp}
        return sums, (mlm_logits, nsp_logits)

    def text_task(self, tokenizer) -> TextTask | None:
        return fill_masks(tokenizer)
