"""A corpus encoded once per tokenizer into a flat file of ids that every run memory-maps.

The cache belongs to a (corpus, tokenizer) pair: its directory is named by a hash of the source
files' paths, sizes and mtimes, the split settings and the tokenizer's serialization, so a changed
file or tokenizer makes a new cache, never a stale one. A directory holds

    tokens.bin       every id, uint16 (uint32 when the vocabulary needs it), training split first
    sentences.npy    documents layout only: token offset of each sentence (one more than sentences)
    documents.npy    documents layout only: sentence offset of each document (one more than documents)
    document_tokens.npy  text layout read as documents only (`xfmr.text.document_text`): token
                     offset of each document (one more than documents)
    index.json       what the files hold and what they were built from; written last

and counts only if its index exists and matches. Of several processes that need one missing
cache, one builds it in a private folder and renames it into place while the others wait
(`xfmr.text.build_once`), so a reader finds a whole cache or none.

Text is encoded in the chunks `xfmr.text.chunks` cuts, in a pool of processes
(`xfmr.text.encoding_pool`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xfmr.errors import UserError
from xfmr.text.build_once import build_once
from xfmr.text.chunks import CHUNK_CHARS, cut_chunks
from xfmr.text.corpus_files import (
    count_chars,
    document_lines,
    sentences_per_document,
    text_pieces,
)
from xfmr.text.document_text import (
    DocumentBreaks,
    document_starts,
    segment_batches,
    split_documents,
)
from xfmr.text.encoding_pool import Encoder
from xfmr.text.fingerprints import cache_key, sources, tokenizer_hash
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")

FORMAT_VERSION = 1
LAYOUTS = ("text", "documents")
INDEX_FILE = "index.json"
TOKENS_FILE = "tokens.bin"
SENTENCES_FILE = "sentences.npy"
DOCUMENTS_FILE = "documents.npy"
DOCUMENT_TOKENS_FILE = "document_tokens.npy"


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits in it, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


# --------------------------------------------------------------------------- the cache


@dataclass(frozen=True)
class TokenCache:
    """A built cache: `index` as written, its files memory-mapped on demand (read-only)."""

    directory: Path
    index: dict[str, Any]

    @property
    def tokens_path(self) -> Path:
        return self.directory / TOKENS_FILE

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.index["dtype"])

    def tokens(self) -> np.memmap:
        return np.memmap(self.tokens_path, dtype=self.dtype, mode="r")

    def ids(self, start: int, stop: int) -> MappedIds:
        return MappedIds(self.tokens_path, self.dtype, start, stop)

    def sentence_offsets(self) -> np.ndarray:
        return np.load(self.directory / SENTENCES_FILE, mmap_mode="r")

    def document_offsets(self) -> np.ndarray:
        return np.load(self.directory / DOCUMENTS_FILE, mmap_mode="r")

    def document_starts(self) -> np.ndarray:
        """Text read as documents: the token offset of each document, and the end."""
        return np.load(self.directory / DOCUMENT_TOKENS_FILE)


class MappedIds:
    """Ids `start:stop` of a tokens file, mapped at the first read in each process: a pickled
    copy (a DataLoader worker's) carries the path, not the ids, and maps the file itself."""

    def __init__(self, path: Path, dtype: np.dtype, start: int, stop: int) -> None:
        self.path, self.dtype, self.start, self.stop = Path(path), np.dtype(dtype), start, stop
        self._map: np.memmap | None = None

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, key: slice) -> np.ndarray:
        if self._map is None:
            self._map = np.memmap(self.path, dtype=self.dtype, mode="r")
        start, stop, step = key.indices(len(self))
        return self._map[self.start + start : self.start + stop : step]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_map": None}


def open_or_build(
    files: Sequence[Path],
    tokenizer: TextTokenizer,
    *,
    layout: str,
    val_fraction: float,
    cache_dir: str | Path,
    workers: int | None = None,
    chunk_chars: int = CHUNK_CHARS,
    documents: DocumentBreaks | None = None,
) -> TokenCache:
    """The cache of `files` under `tokenizer`, built first if no complete, matching one exists.

    Args:
        files: the corpus, in order (text: concatenated; documents: one sentence per line).
        layout: "text" (one stream, split at the tail `val_fraction` of the characters) or
            "documents" (sentences of documents, split at the tail `val_fraction` of documents).
        cache_dir: where cache directories go (one per corpus x tokenizer x split settings).
        workers: encoding processes (None: every core this process may use).
        chunk_chars: characters per encoded chunk.
        documents: text layout: where its documents end, each encoded alone, their offsets
            kept (`xfmr.text.document_text`); None or none set: one stream, as always.
    """
    assert layout in LAYOUTS, layout
    identity = {
        "version": FORMAT_VERSION,
        "layout": layout,
        "sources": sources(files),
        "val_fraction": val_fraction,
        "tokenizer_sha256": tokenizer_hash(tokenizer),
    }
    if documents is not None and documents.any:  # absent otherwise: older caches still count
        assert layout == "text", layout
        identity["documents"] = documents.identity()
    directory = Path(cache_dir) / f"{layout}-{cache_key(identity)}"
    cache = build_once(
        directory,
        lambda: _complete(directory, identity),
        lambda folder: TokenCache(
            directory, _build(folder, identity, files, tokenizer, workers, chunk_chars)
        ),
    )
    log.info(
        "token cache: memory-mapped %d tokens from %s", cache.index["tokens"], cache.tokens_path
    )
    return cache


def _complete(directory: Path, identity: dict[str, Any]) -> TokenCache | None:
    """The cache in `directory` if its index exists, matches `identity` and its files are whole."""
    try:
        index = json.loads((directory / INDEX_FILE).read_text())
    except (OSError, ValueError):
        return None
    if index.get("identity") != identity:
        return None
    cache = TokenCache(directory, index)
    try:
        whole = cache.tokens_path.stat().st_size == index["tokens"] * cache.dtype.itemsize
    except OSError:
        return None
    if identity["layout"] == "documents":
        whole = whole and all((directory / f).is_file() for f in (SENTENCES_FILE, DOCUMENTS_FILE))
    if "documents" in identity:
        whole = whole and (directory / DOCUMENT_TOKENS_FILE).is_file()
    return cache if whole else None


# --------------------------------------------------------------------------- building


def _build(
    folder: Path,
    identity: dict[str, Any],
    files: Sequence[Path],
    tokenizer: TextTokenizer,
    workers: int | None,
    chunk_chars: int,
) -> dict[str, Any]:
    """Encode `files` into `folder` (private to this build); the index written."""
    started = time.perf_counter()
    total_bytes = sum(s["size"] for s in identity["sources"])
    dtype = token_dtype(tokenizer.vocab_size)
    encoder = Encoder(tokenizer, dtype, workers, total_bytes > 2 * chunk_chars)
    with encoder, _Progress(total_bytes) as progress:
        if "documents" in identity:
            layout = _build_text_documents(folder, files, identity, encoder, progress, chunk_chars)
        elif identity["layout"] == "text":
            layout = _build_text(folder, files, identity, encoder, progress, chunk_chars)
        else:
            layout = _build_documents(folder, files, identity, encoder, progress, chunk_chars)
    if sources(files) != identity["sources"]:
        raise UserError(
            f"data.path: a file changed while its tokens were being cached in {folder.parent}; "
            "run again once the files stay unchanged"
        )
    index = {
        "identity": identity,
        "dtype": dtype.name,
        "vocab_size": tokenizer.vocab_size,
        **layout,
    }
    (folder / INDEX_FILE).write_text(json.dumps(index, indent=1))
    seconds = time.perf_counter() - started
    log.info(
        "token cache: built in %.1f s (%.1f MB/s), %d tokens, %.1f MB in %s",
        seconds,
        total_bytes / 1e6 / max(seconds, 1e-9),
        index["tokens"],
        index["tokens"] * dtype.itemsize / 1e6,
        folder,
    )
    return index


def _build_text(directory, files, identity, encoder, progress, chunk_chars) -> dict[str, Any]:
    """One stream of ids: the training characters' then the validation characters'."""
    characters = count_chars(files)
    cut = int(characters * (1.0 - identity["val_fraction"]))  # as split_text cuts
    counts = []
    with _TokenWriter(directory / TOKENS_FILE) as out:
        for start, stop in ((0, cut), (cut, None)):
            chunks = cut_chunks(text_pieces(files, start, stop), chunk_chars)
            counts.append(sum(out.write(ids) for ids in encoder.map(progress.count(chunks))))
    return {
        "characters": characters,
        "train_characters": cut,
        "tokens": sum(counts),
        "train_tokens": counts[0],
    }


def _build_text_documents(
    directory, files, identity, encoder, progress, chunk_chars
) -> dict[str, Any]:
    """`_build_text`'s stream and split, each split's documents encoded alone (a document
    the split cuts is two), with the token offset of each document."""
    breaks = DocumentBreaks(**identity["documents"])
    characters = count_chars(files)
    cut = int(characters * (1.0 - identity["val_fraction"]))  # as split_text cuts
    counts, lengths, ends = [], [np.zeros(0, np.int64)], [np.zeros(0, bool)]
    with _TokenWriter(directory / TOKENS_FILE) as out:
        for start, stop in ((0, cut), (cut, None)):
            pieces = text_pieces(files, start, stop, file_ends=breaks.per_file)
            segments = split_documents(pieces, breaks.separator, chunk_chars)
            batches = segment_batches(segments, chunk_chars)
            counts.append(0)
            for batch_ends, (ids, batch_lengths) in _encoded_documents(encoder, progress, batches):
                counts[-1] += out.write(ids)
                lengths.append(batch_lengths)
                ends.append(np.asarray(batch_ends, bool))
    starts = document_starts(np.concatenate(lengths), np.concatenate(ends))
    _save_npy(directory / DOCUMENT_TOKENS_FILE, starts)
    return {
        "characters": characters,
        "train_characters": cut,
        "tokens": sum(counts),
        "train_tokens": counts[0],
        "documents": len(starts) - 1,
    }


def _build_documents(directory, files, identity, encoder, progress, chunk_chars) -> dict[str, Any]:
    """Every sentence's ids, with the token offset of each sentence and the sentence offset of
    each document."""
    per_document = sentences_per_document(files)
    n_val = max(2, round(len(per_document) * identity["val_fraction"]))  # as DocumentsDataModule
    lengths: list[np.ndarray] = [np.zeros(1, np.int64)]
    with _TokenWriter(directory / TOKENS_FILE) as out:
        batches = _sentence_batches(document_lines(files), chunk_chars)
        for ids, sentence_lengths in encoder.map(progress.count(batches)):
            out.write(ids)
            lengths.append(sentence_lengths)
    sentences = np.cumsum(np.concatenate(lengths))
    documents = np.concatenate([np.zeros(1, np.int64), np.cumsum(per_document)])
    _save_npy(directory / SENTENCES_FILE, sentences)
    _save_npy(directory / DOCUMENTS_FILE, documents)
    return {
        "documents": len(per_document),
        "train_documents": max(0, len(per_document) - n_val),
        "sentences": int(documents[-1]),
        "tokens": int(sentences[-1]),
    }


def _encoded_documents(
    encoder: Encoder, progress: _Progress, batches: Iterable[tuple[tuple[str, ...], tuple]]
) -> Iterator[tuple[tuple[bool, ...], tuple[np.ndarray, np.ndarray]]]:
    """(ends, (ids, lengths)) of each batch of `segment_batches`, in order: the texts go to
    the pool (a tuple: each encoded alone), their ends wait here for them."""
    waiting: deque[tuple[bool, ...]] = deque()

    def texts() -> Iterator[tuple[str, ...]]:
        for batch_texts, batch_ends in batches:
            waiting.append(batch_ends)
            yield batch_texts

    for result in encoder.map(progress.count(texts())):
        yield waiting.popleft(), result


def _sentence_batches(lines: Iterable[str | None], chunk_chars: int) -> Iterator[list[str]]:
    batch, size = [], 0
    for line in lines:
        if line is None:
            continue
        batch.append(line)
        size += len(line)
        if size >= chunk_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


# --------------------------------------------------------------------------- files and progress


class _TokenWriter:
    """Appends arrays of ids to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _TokenWriter:
        self.file = open(self.path, "wb")
        return self

    def write(self, ids: np.ndarray) -> int:
        self.file.write(ids.tobytes())
        return len(ids)

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def _save_npy(path: Path, array_: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array_)


class _Progress:
    """MB encoded and MB/s: a bar on a terminal, else a log line every `LOG_EVERY` bytes."""

    LOG_EVERY = 100_000_000

    def __init__(self, total_bytes: int) -> None:
        self.total = total_bytes
        self.done = self.logged = 0
        self.started = time.perf_counter()
        self.bar = None

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total, unit="B", unit_scale=True, desc="token cache", leave=False
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def count(self, items: Iterable[str | list[str]]) -> Iterator[str | list[str]]:
        """`items` again, counted as they are handed out."""
        for item in items:
            texts = [item] if isinstance(item, str) else item
            self._advance(sum(len(t.encode()) for t in texts))
            yield item

    def _advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done - self.logged >= self.LOG_EVERY:
            self.logged = self.done
            seconds = time.perf_counter() - self.started
            log.info(
                "token cache: %d of %d MB read (%.1f MB/s)",
                self.done // 1_000_000,
                self.total // 1_000_000,
                self.done / 1e6 / max(seconds, 1e-9),
            )
