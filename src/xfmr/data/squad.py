"""SQuAD v1.1 questions cut into BERT's windows (Devlin et al. 2019, sec. 4.2) for extractive QA.

Each question becomes one or more windows `[CLS] question [SEP] context piece [SEP]`; a context
longer than a window is covered by windows `doc_stride` tokens apart, as in BERT's run_squad.py.
Answers map from characters to context tokens through the tokenizer's offsets; a window that
does not hold the whole answer points at [CLS] (position 0), and such windows are counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from xfmr.data.base import ExamplesDataModule, usable_rows
from xfmr.data.files import require_paths
from xfmr.data.formats.squad import QAExample, read_squad
from xfmr.data.settings import AUTO_WORKERS, SPECIAL_TOKENS_PER_WINDOW, check_squad_windows
from xfmr.kinds import QAItem, QAWindow
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")


def answer_tokens(
    offsets: list[tuple[int, int]], char_start: int, char_end: int
) -> tuple[int, int] | None:
    """First and last token overlapping characters [char_start, char_end), or None if none does."""
    inside = [i for i, (start, end) in enumerate(offsets) if start < char_end and end > char_start]
    return (inside[0], inside[-1]) if inside else None


def window_starts(n_tokens: int, *, room: int, doc_stride: int | None) -> list[int]:
    """Where each window of `room` context tokens starts: `doc_stride` apart until one reaches
    the end (BERT's run_squad.py doc spans); doc_stride None keeps the first window only."""
    starts = [0]
    if doc_stride:
        while starts[-1] + room < n_tokens:
            starts.append(starts[-1] + min(doc_stride, room))
    return starts


def split_windows(
    question_ids: list[int],
    context_ids: list[int],
    context_offsets: list[tuple[int, int]],
    answer: tuple[int, int] | None,
    *,
    max_length: int,
    doc_stride: int | None,
) -> list[QAWindow]:
    """The windows one question is read through; `answer` is (first, last) context token."""
    room = max_length - len(question_ids) - SPECIAL_TOKENS_PER_WINDOW
    windows = []
    for start in window_starts(len(context_ids), room=room, doc_stride=doc_stride):
        end = start + room
        inside = answer is not None and start <= answer[0] and answer[1] < end
        windows.append(
            QAWindow(
                question_ids=question_ids,
                context_ids=context_ids[start:end],
                context_offsets=context_offsets[start:end],
                answer=(answer[0] - start, answer[1] - start) if inside else None,
            )
        )
    return windows


class SquadDataModule(ExamplesDataModule):
    """SQuAD v1.1 JSON for extractive question answering; the tokenizer is trained on the
    training questions and contexts.

    Args:
        train_path, val_path: SQuAD v1.1 JSON files.
        max_length: tokens per window, `[CLS] question [SEP] context [SEP]` (BERT: 384).
        doc_stride: context tokens between the starts of consecutive windows (BERT: 128);
            None keeps the first window only, cutting the rest of a long context.
        max_query_length: question tokens kept (BERT: 64).
        batch_size: training windows per batch; validation batches hold this many questions
            with all their windows, so a question's best span is chosen across its windows.
        on_bad_row: "error" stops at the first bad question (named by its id); "skip" drops
            bad questions and logs how many and why.
        packing: several windows share each row (`xfmr.objectives.packing`).
    """

    gives = "questions"  # the kind of examples, xfmr.kinds

    def __init__(
        self,
        *,
        train_path: str | None = None,
        val_path: str | None = None,
        max_length: int = 384,
        doc_stride: int | None = 128,
        max_query_length: int = 64,
        batch_size: int = 32,
        num_workers: int | str = AUTO_WORKERS,
        on_bad_row: str = "error",
        packing: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers, packing=packing)
        require_paths("a SQuAD v1.1 JSON file", train_path=train_path, val_path=val_path)
        check_squad_windows(
            {
                "max_length": max_length,
                "doc_stride": doc_stride,
                "max_query_length": max_query_length,
            }
        )
        self.paths = (train_path, val_path)
        self.max_length = max_length
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length
        self.on_bad_row = on_bad_row
        self._examples: tuple[list[QAExample], list[QAExample]] | None = None
        self.train_set: list[QAItem] = []
        self.val_set: list[QAItem] = []
        self.windows_without_answer = {"train": 0, "val": 0}

    def examples(self) -> tuple[list[QAExample], list[QAExample]]:
        if self._examples is None:
            self._examples = (self._read(self.paths[0]), self._read(self.paths[1]))
        return self._examples

    def _read(self, path: str) -> list[QAExample]:
        examples, bad_rows = read_squad(path, on_bad_row=self.on_bad_row)
        return usable_rows(examples, bad_rows, where=path, noun="questions")

    def split_text(self) -> tuple[str, str]:
        """(train, val) text: each distinct context once, and every question."""
        return tuple(_texts(examples) for examples in self.examples())

    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict],
        *,
        window: int = 1,
    ) -> None:
        train, val = self.examples()
        questions = self._encode(tokenizer, train)
        # Training reads every window on its own, BERT's features; validation keeps a
        # question's windows together to pick its best span.
        self.train_set = [
            QAItem(q.id, q.context, q.answers, [w]) for q in questions for w in q.windows
        ]
        self.val_set = self._encode(tokenizer, val)
        for split, items in (("train", self.train_set), ("val", self.val_set)):
            windows = [w for item in items for w in item.windows]
            self.windows_without_answer[split] = sum(w.answer is None for w in windows)
            log.info(
                "squad %s: %d questions in %d windows of %d tokens; %d windows do not hold "
                "the whole answer (their target is [CLS])",
                split,
                len(train if split == "train" else val),
                len(windows),
                self.max_length,
                self.windows_without_answer[split],
            )
        self.collate_fn = collate_fn
        self.window = window

    def _encode(self, tokenizer: TextTokenizer, examples: list[QAExample]) -> list[QAItem]:
        contexts = list(dict.fromkeys(e.context for e in examples))
        encoded = dict(zip(contexts, tokenizer.encode_batch_with_offsets(contexts), strict=True))
        questions = tokenizer.encode_batch([e.question for e in examples])
        items = []
        for example, question_ids in zip(examples, questions, strict=True):
            context_ids, offsets = encoded[example.context]
            text, start = example.answers[0]  # the training target, as in BERT
            windows = split_windows(
                question_ids[: self.max_query_length],
                context_ids,
                offsets,
                answer_tokens(offsets, start, start + len(text)),
                max_length=self.max_length,
                doc_stride=self.doc_stride,
            )
            answers = [answer for answer, _ in example.answers]
            items.append(QAItem(example.id, example.context, answers, windows))
        return items


def _texts(examples: list[QAExample]) -> str:
    contexts = dict.fromkeys(e.context for e in examples)
    return "\n".join([*contexts, *(e.question for e in examples)])
