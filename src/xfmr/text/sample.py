"""The text a tokenizer trains on: the head of the training split, at most `max_bytes` of UTF-8,
streamed in chunks so a corpus larger than memory never becomes one Python string.

The head, not chunks spread over the corpus: it is one sequential read, the only sample a
streamed dataset can give without reading all of it, and the same for files and streams. A
corpus sorted by topic or date gets a vocabulary biased towards its beginning; raise
`tokenizer.train_sample_mb` (or shuffle the files) when that matters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from xfmr.text.chunks import cut_chunks

BYTES_PER_MB = 1_000_000
# The tokenizers library pre-tokenizes each chunk on its own: chunks are cut only at a space
# between two word characters (`cut_chunks`), where no kind's pre-tokenizer joins the two sides,
# so training counts the same words as on the whole text and the text alone decides the result.
# 64K characters a chunk: the library holds offsets for every byte of the chunks it is working
# on, about 80 MB for a chunk of 1M characters; byte_bpe on a 4 MB sample grows the process by
# ~35 MB with 64K chunks and by ~320 MB with 1M ones.
CHUNK_CHARS = 1 << 16
# A UTF-8 character has at most 4 bytes: asking the data for that much more than the bound
# tells whether the training split goes on past it.
_ONE_CHARACTER = 4


@dataclass(frozen=True)
class Sample:
    """What one pass over the sample found."""

    fingerprint: str  # the tokenizer cache key's data half
    n_bytes: int
    whole: bool  # the whole training split, not only its head


def training_text(
    datamodule: Any, max_bytes: int, *, chunk_chars: int = CHUNK_CHARS
) -> Iterator[str]:
    """The head of `datamodule`'s training split, at most `max_bytes`, in chunks.

    A data module that can read its training split a piece at a time offers
    `training_text_sample(max_bytes)`; the others hold their (small) corpora in memory and give
    `split_text()`, whose training half is cut here.
    """
    sample = head(_pieces(datamodule, max_bytes + _ONE_CHARACTER), max_bytes)
    return cut_chunks(sample, chunk_chars)


def survey(datamodule: Any, max_bytes: int) -> Sample:
    """One pass over the sample `training_text` gives: its fingerprint and size, and whether
    it is the whole training split."""
    digest = hashlib.sha256()
    n_bytes = 0
    for piece in _pieces(datamodule, max_bytes + _ONE_CHARACTER):
        data = piece.encode()
        room = max_bytes - n_bytes
        if len(data) <= room:
            digest.update(data)
        elif room > 0:  # as `head` cuts it
            digest.update(data[:room].decode("utf-8", errors="ignore").encode())
        n_bytes += len(data)
    kept_bytes = min(n_bytes, max_bytes)
    return Sample(digest.hexdigest()[:20], kept_bytes, whole=n_bytes <= max_bytes)


def _pieces(datamodule: Any, max_bytes: int) -> Iterable[str]:
    sample = getattr(datamodule, "training_text_sample", None)
    if sample is not None:
        return sample(max_bytes)
    return [datamodule.split_text()[0]]


def head(pieces: Iterable[str], max_bytes: int) -> Iterator[str]:
    """The text of `pieces` up to `max_bytes` of UTF-8, cut at a character boundary."""
    left = max_bytes
    for piece in pieces:
        data = piece.encode()
        if len(data) > left:
            last = data[:left].decode("utf-8", errors="ignore")
            if last:
                yield last
            return
        left -= len(data)
        yield piece
