"""SQuAD v1.1's exact match and F1, as its official evaluation script (evaluate-v1.1.py,
Rajpurkar et al. 2016) defines them: answers are normalised, F1 counts shared words, and a
prediction scores its best match over the gold answers."""

from __future__ import annotations

import re
import string
from collections import Counter

import torch
from torchmetrics import Metric

_PUNCTUATION = frozenset(string.punctuation)  # ASCII only, as in the official script
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace (in that
    order, as the official script does)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Harmonic mean of word precision and recall after normalisation (words counted with
    multiplicity); 0 when no word is shared, an empty answer included."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


SCORES = {"em": exact_match, "f1": f1}


def squad_scores(prediction: str, gold_answers: list[str]) -> tuple[float, float]:
    """(exact match, F1) of one prediction, each the best over the gold answers."""
    if not gold_answers:
        raise ValueError("a SQuAD question needs at least one gold answer")
    return (
        max(exact_match(prediction, gold) for gold in gold_answers),
        max(f1(prediction, gold) for gold in gold_answers),
    )


class SquadScore(Metric):
    """Mean exact match or F1 over questions, in percent like the official script.

    Sums of the scores and the question count are the state, summed across processes under DDP.

    Args:
        score: "em" (exact match) or "f1".
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, *, score: str, **kwargs) -> None:
        super().__init__(**kwargs)
        if score not in SCORES:
            raise ValueError(f"score={score!r} is not one of {list(SCORES)}")
        self.score = score
        self.score_fn = SCORES[score]
        self.add_state("total", default=torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predictions: list[str], gold_answers: list[list[str]]) -> None:
        if len(predictions) != len(gold_answers):
            raise ValueError(f"{len(predictions)} predictions for {len(gold_answers)} questions")
        self.total += sum(
            max(self.score_fn(p, gold) for gold in golds)
            for p, golds in zip(predictions, gold_answers, strict=True)
        )
        self.count += len(predictions)

    def compute(self) -> torch.Tensor:
        return 100.0 * self.total / self.count.clamp(min=1)
