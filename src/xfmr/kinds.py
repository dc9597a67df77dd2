"""The one contract between data and objectives: the kinds of examples a data module gives
and an objective reads, and what one example of each kind is when it reaches the objective's
`collate`.

A data module declares `gives = KIND` in its class body (or, for data=hf, the kinds its
`data.kind` may choose); an objective declares `reads = KIND`. The config check compares the two
before anything heavy loads (`xfmr.config`), so nothing probes a data module's attributes later.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """A kind of example: its name in declarations, and what `collate` receives per example."""

    name: str
    example: str


TEXT = Kind("text", "a block of block_size + 1 token ids of a running stream (a LongTensor)")
PAIRS = Kind("pairs", "(source ids, target ids), each a list[int]")
LABELLED = Kind("labelled", "(text ids, pair ids or None, label index)")
TAGGED = Kind("tagged", "(the pieces of each word: list[list[int]], a label index per word)")
QUESTIONS = Kind("questions", "a QAItem: a question, its context and the windows it is read in")
DOCUMENTS = Kind(
    "documents", "(sentence A ids, sentence B ids, 0 if B follows A in its document else 1)"
)

KINDS: dict[str, Kind] = {k.name: k for k in (TEXT, PAIRS, LABELLED, TAGGED, QUESTIONS, DOCUMENTS)}


@dataclass(frozen=True)
class QAWindow:
    """One model input's share of a question.

    Args:
        question_ids: the question's tokens (cut to max_query_length).
        context_ids: a stretch of the context's tokens.
        context_offsets: per context token, its (start, end) characters in the whole context.
        answer: the first and last answer token within `context_ids`; None when the window
            does not hold the whole answer (the target is then [CLS]).
    """

    question_ids: list[int]
    context_ids: list[int]
    context_offsets: list[tuple[int, int]]
    answer: tuple[int, int] | None


@dataclass(frozen=True)
class QAItem:
    """A question with the windows it is read through; training items hold one window each."""

    id: str
    context: str
    answers: list[str]
    windows: list[QAWindow]
