"""Entity-level precision, recall and F1 over tag sequences, as seqeval scores them by default
(its `get_entities` chunking, the conlleval rules; Tjong Kim Sang & De Meulder 2003), micro-averaged
over entity types: an entity counts as found only when its type, first and last word all match.

`entities` and `entity_scores` are pure functions; `EntityF1` is a torchmetrics `Metric` that
accumulates the three counts (correct, predicted, gold), so it adds up across batches and
processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torchmetrics import Metric

from xfmr.objectives.common import IGNORE_INDEX

# A word the model gave no prediction (its first piece was cut by truncation): scored as "O".
NO_PREDICTION = -1
SCORES = ("precision", "recall", "f1")

Entity = tuple[str, int, int]  # (type, first word, last word)

# conlleval's chunk boundaries between a previous tag and the current one, by prefix letter
# (seqeval's `end_of_chunk` / `start_of_chunk`; E and S come from IOE/IOBES data).
_ENDS_AFTER = ("E", "S")
_ENDING_PAIRS = {("B", "B"), ("B", "S"), ("B", "O"), ("I", "B"), ("I", "S"), ("I", "O")}
_STARTS_AT = ("B", "S")
_STARTING_PAIRS = {("E", "E"), ("E", "I"), ("S", "E"), ("S", "I"), ("O", "E"), ("O", "I")}
_OUTSIDE = ("O", ".")


def _prefix_and_type(tag: str) -> tuple[str, str]:
    """Split a tag as seqeval does: "B-PER" -> ("B", "PER"), "O" -> ("O", "_")."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _chunk_ends(prev: tuple[str, str], current: tuple[str, str]) -> bool:
    (prev_prefix, prev_type), (prefix, type_) = prev, current
    return (
        prev_prefix in _ENDS_AFTER
        or (prev_prefix, prefix) in _ENDING_PAIRS
        or (prev_prefix not in _OUTSIDE and prev_type != type_)
    )


def _chunk_starts(prev: tuple[str, str], current: tuple[str, str]) -> bool:
    (prev_prefix, prev_type), (prefix, type_) = prev, current
    return (
        prefix in _STARTS_AT
        or (prev_prefix, prefix) in _STARTING_PAIRS
        or (prefix not in _OUTSIDE and prev_type != type_)
    )


def entities(tags: Sequence[str]) -> list[Entity]:
    """The entities of one tag sequence as (type, first, last) word indices, inclusive.

    Lenient like conlleval: an I- without a B- starts an entity, and a change of type ends one
    and starts another (["I-PER", "I-LOC"] is two entities).
    """
    found: list[Entity] = []
    prev, begin = ("O", ""), 0
    for i, tag in enumerate([*tags, "O"]):  # the trailing "O" closes an entity at the end
        current = _prefix_and_type(tag)
        if _chunk_ends(prev, current):
            found.append((prev[1], begin, i - 1))
        if _chunk_starts(prev, current):
            begin = i
        prev = current
    return found


@dataclass(frozen=True)
class EntityCounts:
    """Entities both sequences share (correct), the prediction's, and the gold sequence's."""

    correct: int
    predicted: int
    gold: int

    def scores(self) -> dict[str, float]:
        """Micro precision, recall and F1; 0.0 where a denominator is 0 (seqeval's default)."""
        precision = self.correct / self.predicted if self.predicted else 0.0
        recall = self.correct / self.gold if self.gold else 0.0
        total = precision + recall
        return {
            "precision": precision,
            "recall": recall,
            "f1": 2 * precision * recall / total if total else 0.0,
        }


def entity_counts(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> EntityCounts:
    """Counts over sentences, joined with an "O" between them as seqeval joins them."""
    if len(gold) != len(predicted) or any(
        len(g) != len(p) for g, p in zip(gold, predicted, strict=False)
    ):
        raise ValueError("gold and predicted tags must have the same sentences and lengths")
    gold_entities = set(entities([tag for sentence in gold for tag in (*sentence, "O")]))
    predicted_entities = set(entities([tag for sentence in predicted for tag in (*sentence, "O")]))
    return EntityCounts(
        correct=len(gold_entities & predicted_entities),
        predicted=len(predicted_entities),
        gold=len(gold_entities),
    )


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Entity-level micro precision, recall and F1 of `predicted` against `gold` tag sequences."""
    return entity_counts(gold, predicted).scores()


class EntityF1(Metric):
    """Entity-level precision, recall or F1 from word-level label ids, accumulated as counts.

    `update(preds, target)` takes (B, W) label ids per word: `target` holds IGNORE_INDEX past each
    sentence's end, `preds` may hold NO_PREDICTION (scored as "O", so an entity the model never
    saw still counts against recall). Counts sum across batches and DDP processes; they equal
    `entity_counts` over all sentences whenever each tag is O, starts with B, I, E or S, or
    carries a type (a lone "X" would differ: seqeval lets it run on across sentences).

    Args:
        label_names: the tag of each label id.
        score: which of SCORES `compute` returns.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, label_names: Sequence[str], *, score: str = "f1", **kwargs) -> None:
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"score={score!r} is not one of {list(SCORES)}")
        self.label_names = list(label_names)
        self.score = score
        for name in ("correct", "predicted", "gold"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        gold, predicted = [], []
        for pred_row, target_row in zip(preds.tolist(), target.tolist(), strict=True):
            words = [(p, t) for p, t in zip(pred_row, target_row, strict=True) if t != IGNORE_INDEX]
            gold.append([self.label_names[t] for _, t in words])
            predicted.append([self._tag(p) for p, _ in words])
        counts = entity_counts(gold, predicted)
        self.correct += counts.correct
        self.predicted += counts.predicted
        self.gold += counts.gold

    def _tag(self, label_id: int) -> str:
        return "O" if label_id == NO_PREDICTION else self.label_names[label_id]

    def compute(self) -> torch.Tensor:
        counts = EntityCounts(int(self.correct), int(self.predicted), int(self.gold))
        return torch.tensor(counts.scores()[self.score], dtype=torch.float32)
