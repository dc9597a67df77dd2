"""A text corpus read as documents: where each ends (after a separator string, at a file's end),
each document's ids and the token offset where each starts in the stream of ids.

A document keeps its separator at its end (GPT-2's <|endoftext|>: the model learns to end a
document), so the documents joined are the text again, character for character. Each is encoded
on its own, so that a token never spans two documents; a document longer than a chunk is
encoded in segments cut where `xfmr.text.chunks` cuts (the same ids), and its segments'
lengths summed. The token cache (`xfmr.text.token_cache`) and the in-memory path read the
documents through the same functions, so both give the same ids and the same offsets.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xfmr.text.chunks import CHUNK_CHARS, ENCODE_CHARS, SAFE_CUT, char_table, cut_chunks
from xfmr.text.tokenizers import TextTokenizer

BATCH_CHARS = 16 * ENCODE_CHARS  # characters per call of the tokenizer (see encode_chunk)


@dataclass(frozen=True)
class DocumentBreaks:
    """Where a corpus's documents end (`data.document_separator`, `data.documents_per_file`).

    Args:
        separator: a document ends after each occurrence of this string; None: not at a string.
        per_file: a document ends at the end of each file.
    """

    separator: str | None = None
    per_file: bool = False

    @property
    def any(self) -> bool:
        """Whether the corpus has documents at all (else it is one stream, as it always was)."""
        return self.separator is not None or self.per_file

    def identity(self) -> dict[str, Any]:
        """What a token cache of these documents is keyed by."""
        return {"separator": self.separator, "per_file": self.per_file}


def split_documents(
    pieces: Iterable[str | None], separator: str | None, chunk_chars: int = CHUNK_CHARS
) -> Iterator[tuple[str, bool]]:
    """(segment, ends a document) for the text of `pieces` (None: a document ends here, a
    file's end). A document ends just after each `separator`; one longer than `chunk_chars`
    comes in segments cut at `SAFE_CUT`, so no segment holds more than a chunk's text (a text
    with no such space for a long stretch makes a longer one). Empty documents are dropped."""
    buffer, searched = "", 0
    for piece in pieces:
        if piece is None:
            if buffer:
                yield buffer, True
            buffer, searched = "", 0
            continue
        buffer += piece
        while separator and (found := buffer.find(separator, searched)) >= 0:
            end = found + len(separator)
            yield buffer[:end], True
            buffer, searched = buffer[end:], 0
        # A separator may yet start at `tail` (its head is the buffer's end): no cut after it.
        tail = max(0, len(buffer) - len(separator) + 1) if separator else len(buffer)
        while len(buffer) > chunk_chars and (cut := SAFE_CUT.search(buffer, chunk_chars, tail)):
            yield buffer[: cut.start()], False
            buffer, tail = buffer[cut.start() :], tail - cut.start()
        searched = tail if separator else 0
    if buffer:
        yield buffer, True


def encode_texts(
    tokenizer: TextTokenizer, texts: Sequence[str], dtype: Any = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """(the ids of every text, each encoded alone as `encode_chunk` encodes it, concatenated;
    each text's number of ids). Short texts share a call of the tokenizer."""
    table = char_table(tokenizer)
    if table is not None and not any(t in text for text in texts for t in table.added):
        parts = [table.encode(text, dtype) for text in texts]
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        return np.concatenate([np.zeros(0, dtype), *parts]), lengths
    owners, pieces = [], []
    for i, text in enumerate(texts):
        for piece in cut_chunks([text], ENCODE_CHARS):
            owners.append(i)
            pieces.append(piece)
    parts = []
    for group in _groups(pieces, BATCH_CHARS):
        parts += [np.asarray(ids, dtype) for ids in tokenizer.encode_batch(group)]
    sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    lengths = np.bincount(np.asarray(owners, np.int64), weights=sizes, minlength=len(texts))
    return np.concatenate([np.zeros(0, dtype), *parts]), lengths.astype(np.int64)


def _groups(texts: list[str], chars: int) -> Iterator[list[str]]:
    """`texts` in order, in groups of about `chars` characters (at least one text each)."""
    sizes = itertools.accumulate(len(t) for t in texts)
    for _, group in itertools.groupby(zip(sizes, texts, strict=True), key=lambda s: s[0] // chars):
        yield [text for _, text in group]


def document_starts(lengths: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Token offset of each document's first id, and one past the last id: from the segments'
    numbers of ids (`lengths`) and whether each ends its document (`ends`)."""
    stops = np.cumsum(np.asarray(lengths, np.int64))[np.asarray(ends, bool)]
    return np.concatenate([np.zeros(1, np.int64), stops])


def encode_documents(
    tokenizer: TextTokenizer,
    pieces: Iterable[str | None],
    separator: str | None,
    chunk_chars: int = CHUNK_CHARS,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, `document_starts`) of the documents of `pieces` (see `split_documents`), in memory."""
    segments = list(split_documents(pieces, separator, chunk_chars))
    ids, lengths = encode_texts(tokenizer, [text for text, _ in segments])
    return ids, document_starts(lengths, np.array([end for _, end in segments], bool))


def segment_batches(
    segments: Iterable[tuple[str, bool]], chunk_chars: int = CHUNK_CHARS
) -> Iterator[tuple[tuple[str, ...], tuple[bool, ...]]]:
    """The segments in batches of about `chunk_chars` characters: (texts, ends) each, what a
    process of the token cache's pool encodes at a time (`encode_texts`)."""
    texts: list[str] = []
    ends: list[bool] = []
    size = 0
    for text, end in segments:
        texts.append(text)
        ends.append(end)
        size += len(text)
        if size >= chunk_chars:
            yield tuple(texts), tuple(ends)
            texts, ends, size = [], [], 0
    if texts:
        yield tuple(texts), tuple(ends)
