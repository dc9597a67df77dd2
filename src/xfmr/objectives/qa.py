"""Extractive question answering (Devlin et al. 2019, sec. 4.2): `[CLS] question [SEP] context
[SEP]` with segment ids 0 / 1, a start and an end logit per token, loss = the mean of the start
and end cross-entropies; validation decodes the best span and scores it with SQuAD's EM / F1.

Packed (`data.packing`), windows share rows, each attending within itself: a window's start and
end targets are offset to its place in its row, its softmax runs over its own tokens only, and
decoding reads its logits back in a row of its own (`xfmr.objectives.unpacking`), so every
window is counted and scored as unpacked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import bert_special_ids, pad_rows
from xfmr.objectives.contract import Objective
from xfmr.objectives.packing import pack
from xfmr.objectives.squad_metrics import SquadScore
from xfmr.objectives.unpacking import example_places, unpack

if TYPE_CHECKING:
    from xfmr.kinds import QAItem, QAWindow

CLS_POSITION = 0  # where a window without the answer points (BERT's run_squad.py)


class SpanSources:
    """What turns a batch's span logits back into answer text, kept beside its tensors.

    Per window: the question it belongs to, the position of its first context token and each
    context token's character offsets; per question: the context and the gold answers. A plain
    class (not a list or dataclass) so Lightning's batch transfer passes it over untouched.
    """

    def __init__(self) -> None:
        self.question_of: list[int] = []
        self.context_start: list[int] = []
        self.offsets: list[list[tuple[int, int]]] = []
        self.contexts: list[str] = []
        self.answers: list[list[str]] = []

    def add(self, item: QAItem) -> None:
        for window in item.windows:
            self.question_of.append(len(self.contexts))
            self.context_start.append(len(window.question_ids) + 2)  # after [CLS] q [SEP]
            self.offsets.append(window.context_offsets)
        self.contexts.append(item.context)
        self.answers.append(item.answers)

    def context_mask(self, length: int, *, device: torch.device | None = None) -> torch.Tensor:
        """(windows, length) bool: True at each window's context tokens (not [SEP], padding)."""
        mask = torch.zeros(len(self.offsets), length, dtype=torch.bool)
        for row, (start, offsets) in enumerate(zip(self.context_start, self.offsets, strict=True)):
            mask[row, start : start + len(offsets)] = True
        return mask.to(device)

    def text(self, window: int, start: int, end: int) -> str:
        """The context characters from the start piece's first to the end piece's last."""
        offsets, first = self.offsets[window], self.context_start[window]
        context = self.contexts[self.question_of[window]]
        return context[offsets[start - first][0] : offsets[end - first][1]]


def best_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    context_mask: torch.Tensor,
    *,
    max_answer_length: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The highest-scoring span of each row, score start_i + end_j (Devlin et al. 2019,
    sec. 4.2), with end >= start, at most `max_answer_length` tokens, both ends in the context.

    start_logits, end_logits: (B, T); context_mask: (B, T) bool.
    Returns starts, ends and scores (B,); a row without context tokens scores -inf.
    """
    T = start_logits.size(1)
    positions = torch.arange(T, device=start_logits.device)
    length = positions[None, :] - positions[:, None]  # (T, T): end - start
    allowed = (length >= 0) & (length < max_answer_length)  # (T, T)
    allowed = allowed[None] & context_mask[:, :, None] & context_mask[:, None, :]  # (B, T, T)
    scores = start_logits.float()[:, :, None] + end_logits.float()[:, None, :]  # (B, T, T)
    scores = scores.masked_fill(~allowed, float("-inf")).flatten(1)  # (B, T * T)
    best, index = scores.max(dim=1)
    return index // T, index % T, best


class QuestionAnsweringObjective(Objective):
    """Args:
    max_answer_length: the longest span decoding may predict, in tokens (BERT: 30).
    """

    name = "qa"
    # A span's start and end are scored knowing the whole context, both sides: an encoder.
    archs = ("encoder",)
    reads = "questions"
    segments = 2  # question and context
    by_perplexity = False
    loss_terms = ("windows",)  # a mean over the rows (windows), of start's and end's losses
    required_special_tokens = ("[PAD]", "[CLS]", "[SEP]")
    packs = True

    def __init__(self, *, max_answer_length: int = 30) -> None:
        if max_answer_length < 1:
            raise UserError(
                f"objective.max_answer_length={max_answer_length} must be a positive "
                "number of tokens (BERT: 30)"
            )
        self.max_answer_length = max_answer_length
        self.pad_id = self.cls_id = self.sep_id = None

    def bind(self, tokenizer) -> None:
        self.pad_id, self.cls_id, self.sep_id = bert_special_ids(tokenizer)

    def build_model(self, config: ModelConfig) -> nn.Module:
        from xfmr.nn.heads import SpanExtraction

        return SpanExtraction(config)

    def metrics(self) -> dict[str, nn.Module]:
        return {"em": SquadScore(score="em"), "f1": SquadScore(score="f1")}

    def update_metrics(self, metrics: nn.ModuleDict, logits: torch.Tensor, batch: dict) -> None:
        sources: SpanSources = batch["spans"]
        if "document_ids" in batch:  # packed rows: each window's logits in a row of its own
            n = len(sources.question_of)
            logits = unpack(logits, batch["document_ids"], n, fill=torch.finfo(logits.dtype).min)
        predictions = self.predict(logits, sources)
        for metric in metrics.values():  # em, f1
            metric.update(predictions, sources.answers)

    def predict(self, logits: torch.Tensor, sources: SpanSources) -> list[str]:
        """Each question's answer text: its best span over all of its windows."""
        mask = sources.context_mask(logits.size(1), device=logits.device)
        starts, ends, scores = best_spans(
            logits[..., 0], logits[..., 1], mask, max_answer_length=self.max_answer_length
        )
        best: dict[int, tuple[float, str]] = {}
        for window, (start, end, score) in enumerate(
            zip(starts.tolist(), ends.tolist(), scores.tolist(), strict=True)
        ):
            question = sources.question_of[window]
            if score > best.get(question, (float("-inf"), ""))[0]:
                best[question] = (score, sources.text(window, start, end))
        return [best.get(q, (0.0, ""))[1] for q in range(len(sources.contexts))]

    def encode(self, window: QAWindow) -> tuple[list[int], list[int], tuple[int, int]]:
        """(ids, segment ids, (start, end) target) of `[CLS] question [SEP] context [SEP]`."""
        first = len(window.question_ids) + 2
        ids = [self.cls_id, *window.question_ids, self.sep_id, *window.context_ids, self.sep_id]
        segments = [0] * first + [1] * (len(window.context_ids) + 1)
        if window.answer is None:  # the answer lies outside this window
            return ids, segments, (CLS_POSITION, CLS_POSITION)
        return ids, segments, (first + window.answer[0], first + window.answer[1])

    def collate(self, items: list[QAItem]) -> dict:
        """Questions (with their windows) -> one padded row per window, plus `spans`, the
        `SpanSources` that decoding needs."""
        rows, segments, targets, sources = [], [], [], SpanSources()
        for item in items:
            sources.add(item)
            for window in item.windows:
                ids, segment_ids, target = self.encode(window)
                rows.append(ids)
                segments.append(segment_ids)
                targets.append(target)
        input_ids, attention_mask = pad_rows(rows, self.pad_id)
        token_type_ids, _ = pad_rows(segments, 0)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "labels": torch.tensor(targets, dtype=torch.long),  # (windows, 2): start, end
            "spans": sources,
        }

    def counts(self, batch: dict) -> dict[str, torch.Tensor]:
        labels = batch["labels"]  # (windows, 2): every window has a target, [CLS]'s at least
        return {"windows": torch.ones_like(labels[:, 0]).sum()}  # made where labels are: no copy

    def pack(self, batch: dict) -> dict:
        """Windows share rows with their segments; each window's start and end move with it."""
        keys = {"input_ids": self.pad_id, "attention_mask": 0, "token_type_ids": 0}
        packed = pack(batch, [("attention_mask", "document_ids", keys)])
        n = batch["labels"].size(0)
        _, starts, _ = example_places(packed["document_ids"], n)
        return {**packed, "labels": batch["labels"] + starts[:, None]}  # (windows, 2), in rows

    def forward(
        self, model: nn.Module, batch: dict
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(the windows' loss summed, logits (R, T, 2)); packed rows (R rows) give each window's
        softmax its own tokens only."""
        packed = {"document_ids": batch["document_ids"]} if "document_ids" in batch else {}
        logits = model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], **packed
        )
        # Padding can be neither end of an answer.
        padding = batch["attention_mask"][..., None] == 0  # (R, T, 1)
        logits = logits.float().masked_fill(padding, torch.finfo(torch.float32).min)  # (R, T, 2)
        scores = logits  # (W, T, 2): a row per window
        if packed:
            scores = window_logits(logits, batch["document_ids"], batch["labels"].size(0))
        start_loss = F.cross_entropy(scores[..., 0], batch["labels"][:, 0], reduction="sum")
        end_loss = F.cross_entropy(scores[..., 1], batch["labels"][:, 1], reduction="sum")
        return {"windows": (start_loss + end_loss) / 2}, logits  # Devlin et al. 2019, sec. 4.2


def window_logits(logits: torch.Tensor, document_ids: torch.Tensor, n: int) -> torch.Tensor:
    """Span logits (R, T, 2) of packed rows -> (n, T, 2): each of the n windows' row, the
    tokens of the other windows there as unlikely as padding, so each softmax is its own."""
    rows, _, _ = example_places(document_ids, n)
    own = document_ids[rows] == torch.arange(n, device=logits.device)[:, None]  # (W, T)
    return logits[rows].masked_fill(~own[..., None], torch.finfo(logits.dtype).min)
