"""Text encoded in chunks cut only where no tokenizer of xfmr joins characters into one token:
at a space between two word characters (see `cut_chunks`). Encoding chunk by chunk then gives
the ids encoding the whole text would, for every kind xfmr trains; the token cache and the
in-memory path encode the same chunks (`encode_stream`), so both give the same ids for any
tokenizer."""

from __future__ import annotations

import itertools
import json
import re
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from xfmr.text.tokenizers import TextTokenizer

CHUNK_CHARS = 1 << 20  # characters per encoded chunk: big enough that pool overheads vanish
ENCODE_CHARS = 1 << 14  # characters per call of the tokenizer (see encode_chunk)
# A space between two word characters: no pre-tokenizer of xfmr's kinds (char, byte-level,
# Metaspace bpe/unigram, BERT) joins the characters on its two sides, and the chunk after it
# starts with a space, so Metaspace's "always" prefix is not added a second time.
SAFE_CUT = re.compile(r"(?<=\w) (?=\w)")


def cut_chunks(pieces: Iterable[str], chunk_chars: int = CHUNK_CHARS) -> Iterator[str]:
    """The text of `pieces` again, in chunks of about `chunk_chars` cut at `SAFE_CUT` (a text
    with no such space for a long stretch makes a longer chunk)."""
    buffer, searched = "", 0
    for piece in pieces:
        buffer += piece
        while len(buffer) > chunk_chars:
            cut = SAFE_CUT.search(buffer, max(chunk_chars, searched))
            if cut is None:
                searched = max(len(buffer) - 1, searched)
                break
            yield buffer[: cut.start()]
            buffer, searched = buffer[cut.start() :], 0
    if buffer:
        yield buffer


def encode_chunk(tokenizer: TextTokenizer, chunk: str, dtype: Any = np.int64) -> np.ndarray:
    """The ids of `chunk`, encoded in pieces of about ENCODE_CHARS cut as `cut_chunks` cuts:
    tokenizers' cost per character grows with the length of the text it is given."""
    table = char_table(tokenizer)
    if table is not None and not any(token in chunk for token in table.added):
        return table.encode(chunk, dtype)
    parts = [np.zeros(0, dtype)]
    pieces = cut_chunks([chunk], ENCODE_CHARS)
    while group := list(itertools.islice(pieces, 16)):  # Encodings are large: a few at a time
        parts += [np.asarray(ids, dtype) for ids in tokenizer.encode_batch(group)]
    return np.concatenate(parts)


@dataclass(frozen=True)
class _CharTable:
    """kind=char as a lookup table from code point to id: what its Split-every-character
    pre-tokenizer and WordLevel model compute, a hundred times faster. Text holding an added
    token (matched whole by the tokenizer) is left to the tokenizer."""

    ids: np.ndarray  # id of each code point below len(ids)
    unknown: int
    added: tuple[str, ...]

    def encode(self, text: str, dtype: Any) -> np.ndarray:
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        known = points < len(self.ids)
        return np.where(known, self.ids.astype(dtype)[np.where(known, points, 0)], self.unknown)


_CHAR_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def char_table(tokenizer: TextTokenizer) -> _CharTable | None:
    """The lookup table of a kind=char tokenizer (as `train_tokenizer` builds it), else None."""
    if tokenizer not in _CHAR_TABLES:
        config = json.loads(tokenizer.tokenizer.to_str())
        model, split = config.get("model") or {}, config.get("pre_tokenizer") or {}
        table = None
        char_kind = (
            model.get("type") == "WordLevel"
            and config.get("normalizer") is None
            and split == {**split, "type": "Split", "behavior": "Isolated", "invert": False}
            and split.get("pattern") == {"Regex": r"[\s\S]"}
        )
        unknown = model["vocab"].get(model.get("unk_token")) if char_kind else None
        if unknown is not None:
            singles = {ord(k): v for k, v in model["vocab"].items() if len(k) == 1}
            ids = np.full(max(singles, default=0) + 1, unknown, dtype=np.int64)
            ids[list(singles)] = list(singles.values())
            added = tuple(t["content"] for t in config.get("added_tokens") or [])
            table = _CharTable(ids, unknown, added)
        _CHAR_TABLES[tokenizer] = table
    return _CHAR_TABLES[tokenizer]


def encode_stream(
    tokenizer: TextTokenizer, chunks: Iterable[str], dtype: Any = np.int64
) -> Iterator[np.ndarray]:
    """The ids of each chunk; joined, the ids of the whole text (for cuts made by `cut_chunks`)."""
    for chunk in chunks:
        yield encode_chunk(tokenizer, chunk, dtype)


def encode_text(tokenizer: TextTokenizer, text: str, chunk_chars: int = CHUNK_CHARS) -> np.ndarray:
    """All ids of `text`, encoded in the chunks the cache encodes (int64)."""
    chunks = cut_chunks([text], chunk_chars)
    return np.concatenate([np.zeros(0, np.int64), *encode_stream(tokenizer, chunks)])
