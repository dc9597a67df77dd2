"""Labelled texts (or text pairs) from TSV, CSV or JSONL files, for classification."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xfmr.data.base import ExamplesDataModule, usable_rows
from xfmr.data.files import require_paths
from xfmr.data.formats.delimited import TextExample, read_delimited
from xfmr.data.settings import AUTO_WORKERS
from xfmr.text.tokenizers import TextTokenizer


class DelimitedDataModule(ExamplesDataModule):
    """Args:
    train_path, val_path: TSV/CSV/JSONL files (the suffix decides the format).
    text_field, label_field, text_pair_field: column names (or indices without a header).
    labels: the label set, in class-index order; None takes the sorted labels of the training
        file, and a validation label outside it is a bad row.
    packing: several examples share each row (`xfmr.objectives.packing`).
    on_bad_row: "error" stops at the first bad row with its file and line; "skip" drops bad
        rows and logs how many and why.
    """

    gives = "labelled"  # the kind of examples, xfmr.kinds

    def __init__(
        self,
        *,
        train_path: str | None = None,
        val_path: str | None = None,
        text_field: str | int = "sentence",
        label_field: str | int = "label",
        text_pair_field: str | int | None = None,
        labels: list[str] | None = None,
        batch_size: int = 32,
        num_workers: int | str = AUTO_WORKERS,
        on_bad_row: str = "error",
        packing: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers, packing=packing)
        require_paths("a TSV, CSV or JSONL file", train_path=train_path, val_path=val_path)
        self.paths = (train_path, val_path)
        self.fields = {
            "text_field": text_field,
            "label_field": label_field,
            "text_pair_field": text_pair_field,
        }
        self.labels = [str(label) for label in labels] if labels else None
        self.on_bad_row = on_bad_row
        self._examples: tuple[list[TextExample], list[TextExample]] | None = None
        self.train_set: list = []
        self.val_set: list = []

    def examples(self) -> tuple[list[TextExample], list[TextExample]]:
        if self._examples is None:
            train = self._read(self.paths[0], self.labels)
            self.labels = self.labels or sorted({e.label for e in train})
            self._examples = (train, self._read(self.paths[1], self.labels))
        return self._examples

    def _read(self, path: str, labels: list[str] | None) -> list[TextExample]:
        examples, bad_rows = read_delimited(
            path, **self.fields, labels=labels, on_bad_row=self.on_bad_row
        )
        return usable_rows(examples, bad_rows, where=path)

    def label_names(self) -> list[str]:
        self.examples()
        return list(self.labels)

    def split_text(self) -> tuple[str, str]:
        train, val = self.examples()
        return _texts(train), _texts(val)

    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict],
        *,
        window: int = 1,
    ) -> None:
        index = {label: i for i, label in enumerate(self.label_names())}
        train, val = self.examples()
        self.train_set = self._encode(tokenizer, train, index)
        self.val_set = self._encode(tokenizer, val, index)
        self.collate_fn = collate_fn
        self.window = window

    @staticmethod
    def _encode(tokenizer: TextTokenizer, rows: list[TextExample], index: dict[str, int]) -> list:
        texts = tokenizer.encode_batch([e.text for e in rows])
        pairs = [tokenizer.encode(e.text_pair) if e.text_pair else None for e in rows]
        return [(t, p, index[e.label]) for t, p, e in zip(texts, pairs, rows, strict=True)]


def _texts(rows: list[TextExample]) -> str:
    return "\n".join(e.text + ("\n" + e.text_pair if e.text_pair else "") for e in rows)
