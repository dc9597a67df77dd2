"""Tagged sentences from CoNLL column files (one word per line, a blank line between sentences),
for token tagging such as CoNLL-2003 NER (`word POS chunk tag` or `word POS tag`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from xfmr.data.base import ExamplesDataModule, usable_rows
from xfmr.data.files import require_paths
from xfmr.data.formats.bad_rows import ON_BAD_ROW_CHOICES, BadRow, BadRows
from xfmr.data.formats.conll import TaggedSentence, conll_blocks, read_conll
from xfmr.data.formats.reading import read_lines
from xfmr.data.settings import AUTO_WORKERS
from xfmr.errors import UserError
from xfmr.text.tokenizers import TextTokenizer


class ConllDataModule(ExamplesDataModule):
    """Args:
    train_path, val_path: CoNLL files; `-DOCSTART-` lines and blank lines separate sentences.
    token_column, tag_column: 0-based column of the word and of its tag (negative counts from
        the end: CoNLL-2003's NER tag is the last column).
    tag_scheme: "iob2" (alias "bio") checks each tag is O, B-X or I-X continuing an X entity;
        None accepts any tag.
    labels: the tag set, in label-index order; None takes the sorted tags of the training
        file. A tag outside it (in either file) is a bad row.
    on_bad_row: "error" stops at the first bad row with its file and line; "skip" drops the
        sentence holding it and logs how many and why.
    packing: several sentences share each row (`xfmr.objectives.packing`).
    """

    gives = "tagged"  # the kind of examples, xfmr.kinds

    def __init__(
        self,
        *,
        train_path: str | None = None,
        val_path: str | None = None,
        token_column: int = 0,
        tag_column: int = -1,
        tag_scheme: str | None = "iob2",
        labels: list[str] | None = None,
        batch_size: int = 32,
        num_workers: int | str = AUTO_WORKERS,
        on_bad_row: str = "error",
        packing: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers, packing=packing)
        require_paths("a CoNLL file", train_path=train_path, val_path=val_path)
        if on_bad_row not in ON_BAD_ROW_CHOICES:
            raise UserError(
                f"data.on_bad_row={on_bad_row!r} is not valid: use one of {list(ON_BAD_ROW_CHOICES)}"
            )
        self.paths = (train_path, val_path)
        self.columns = {"token_column": token_column, "tag_column": tag_column}
        self.tag_scheme = tag_scheme
        self.labels = [str(label) for label in labels] if labels else None
        self.on_bad_row = on_bad_row
        self._sentences: tuple[list[TaggedSentence], list[TaggedSentence]] | None = None
        self.train_set: list = []
        self.val_set: list = []

    def examples(self) -> tuple[list[TaggedSentence], list[TaggedSentence]]:
        """(training, validation) sentences, read once; the label set comes from training."""
        if self._sentences is None:
            train = self._read(self.paths[0], self.labels)
            self.labels = self.labels or sorted({tag for s in train for tag in s.tags})
            self._sentences = (train, self._read(self.paths[1], self.labels))
        return self._sentences

    def _read(self, path: str, labels: list[str] | None) -> list[TaggedSentence]:
        sentences, bad_rows = read_conll(
            path, **self.columns, tag_scheme=self.tag_scheme, on_bad_row=self.on_bad_row
        )
        if labels is not None:
            sentences = _known_tags_only(path, sentences, bad_rows, labels, self.on_bad_row)
        return usable_rows(sentences, bad_rows, where=path, noun="sentences")

    def label_names(self) -> list[str]:
        self.examples()
        return list(self.labels)

    def split_text(self) -> tuple[str, str]:
        """Training and validation sentences, one per line with words between spaces."""
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
        self.train_set = _encode(tokenizer, train, index)
        self.val_set = _encode(tokenizer, val, index)
        self.collate_fn = collate_fn
        self.window = window


def _encode(
    tokenizer: TextTokenizer, sentences: list[TaggedSentence], index: dict[str, int]
) -> list[tuple[list[list[int]], list[int]]]:
    """Each word tokenized on its own (one batch call for all words): (pieces per word, labels)."""
    pieces = iter(tokenizer.encode_batch([word for s in sentences for word in s.tokens]))
    return [([next(pieces) for _ in s.tokens], [index[tag] for tag in s.tags]) for s in sentences]


def _texts(sentences: list[TaggedSentence]) -> str:
    return "\n".join(" ".join(s.tokens) for s in sentences)


def _known_tags_only(
    path: str,
    sentences: list[TaggedSentence],
    bad_rows: BadRows,
    labels: list[str],
    on_bad_row: str,
) -> list[TaggedSentence]:
    """The sentences whose tags are all in `labels`; another tag is a bad row at its line."""
    known, kept = set(labels), []
    for sentence, lines in zip(sentences, _token_lines(path, bad_rows), strict=True):
        unknown = next((i for i, tag in enumerate(sentence.tags) if tag not in known), None)
        if unknown is None:
            kept.append(sentence)
            continue
        reason = (
            f"unknown tag {sentence.tags[unknown]!r}; valid tags (data.labels, by default the "
            f"training file's): {labels}; skipping the sentence starting at line {lines[0]}"
        )
        row = BadRow(str(Path(path)), reason, lines[unknown])
        if on_bad_row == "error":
            raise UserError(f"{row} (set data.on_bad_row=skip to skip bad rows and report them)")
        bad_rows.rows.append(row)
    return kept


def _token_lines(path: str, bad_rows: BadRows) -> list[list[int]]:
    """The line number of each word of each sentence `read_conll` kept: its blocks of lines, in
    file order, less those holding a bad row it recorded."""
    bad_lines = {row.line for row in bad_rows}
    blocks = [[line for line, _ in rows] for _, rows in conll_blocks(read_lines(Path(path)))]
    return [lines for lines in blocks if bad_lines.isdisjoint(lines)]
