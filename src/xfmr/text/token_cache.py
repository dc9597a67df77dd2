"""A corpus encoded once per tokenizer into a flat file of ids that every run memory-maps.

The cache belongs to a (corpus, tokenizer) pair: its directory is named by a hash of the source
files' paths, sizes and mtimes, the split settings and the tokenizer's serialization, so a changed
file or tokenizer makes a new cache, never a stale one. A directory holds

    tokens.bin       every id, uint16 (uint32 when the vocabulary needs it), training split first
    sentences.npy    documents layout only: token offset of each sentence (one more than sentences)
    documents.npy    documents layout only: sentence offset of each document (one more than documents)
    index.json       what the files hold and what they were built from; written last

and counts only if its index exists and matches. Builds take a file lock beside the directory,
so of several processes (DDP ranks, sweep jobs) that need one missing cache, one builds and the
others wait; a build killed halfway leaves temporary names and no index, and is redone.

Text is read in chunks cut only where no tokenizer of xfmr joins characters into one token: at
a space between two word characters (see `cut_chunks`). Encoding chunk by chunk then gives the
ids encoding the whole text would, for every kind xfmr trains; the in-memory path encodes the
same chunks (`encode_stream`), so both paths give the same ids for any tokenizer.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import re
import sys
import time
import weakref
from array import array
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xfmr.errors import UserError
from xfmr.files import atomic_path, atomic_write_bytes
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")

FORMAT_VERSION = 1
LAYOUTS = ("text", "documents")
CHUNK_CHARS = 1 << 20  # characters per encoded chunk: big enough that pool overheads vanish
READ_CHARS = 1 << 20  # characters read from a file at a time
ENCODE_CHARS = 1 << 14  # characters per call of the tokenizer (see encode_chunk)
INDEX_FILE = "index.json"
TOKENS_FILE = "tokens.bin"
SENTENCES_FILE = "sentences.npy"
DOCUMENTS_FILE = "documents.npy"
# A space between two word characters: no pre-tokenizer of xfmr's kinds (char, byte-level,
# Metaspace bpe/unigram, BERT) joins the characters on its two sides, and the chunk after it
# starts with a space, so Metaspace's "always" prefix is not added a second time.
SAFE_CUT = re.compile(r"(?<=\w) (?=\w)")


# --------------------------------------------------------------------------- reading the text


def text_pieces(files: Sequence[Path], start: int = 0, stop: int | None = None) -> Iterator[str]:
    """The files' text, concatenated, from character `start` to `stop`, as read_utf8 reads it
    (UTF-8, universal newlines), a block at a time."""
    position = 0
    for path in files:
        with _utf8(path) as f:
            while block := _read(f, path):
                begin, position = position, position + len(block)
                if position <= start:
                    continue
                if stop is not None and begin >= stop:
                    return
                yield block[max(0, start - begin) : None if stop is None else stop - begin]


CHAR_COUNTS_FILE = "char_counts.json"


def count_chars(files: Sequence[Path], memo_dir: str | Path | None = None) -> int:
    """Characters of the files' text; a file with no text in it is refused, as read_text does.

    With `memo_dir`, counts are kept in `memo_dir/char_counts.json` by the files' identity (path,
    size, mtime), so a later run on the same files does not read a large corpus again to know
    where its training split ends."""
    if memo_dir is None:
        return _count_chars(files)
    memo_path = Path(memo_dir) / CHAR_COUNTS_FILE
    key = cache_key({"sources": sources(files)})
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if isinstance(memo.get(key), int):
        return memo[key]
    total = _count_chars(files)
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(memo_path, json.dumps({**memo, key: total}).encode())
    return total


def _count_chars(files: Sequence[Path]) -> int:
    total = 0
    for path in files:
        blank = True
        with _utf8(path) as f:
            while block := _read(f, path):
                total += len(block)
                blank = blank and not block.strip()
        if blank:
            raise UserError(f"data.path file {str(path)!r} is empty")
    return total


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
    table = _char_table(tokenizer)
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


def _char_table(tokenizer: TextTokenizer) -> _CharTable | None:
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


def document_lines(files: Sequence[Path]) -> Iterator[str | None]:
    """Each file's stripped non-blank lines, None where a document ends (a blank line after a
    document's sentences, or a file's end): the documents read_documents reads."""
    for path in files:
        in_document = False
        with _utf8(path) as f:
            for raw in _lines(f, path):
                for line in raw.splitlines():  # as str.splitlines splits the whole text
                    if line.strip():
                        in_document = True
                        yield line.strip()
                    elif in_document:
                        in_document = False
                        yield None
        if in_document:
            yield None


def _utf8(path: Path):
    return open(path, encoding="utf-8")  # newline=None: universal newlines, as read_text


def _read(f, path: Path) -> str:
    try:
        return f.read(READ_CHARS)
    except UnicodeDecodeError as e:
        raise UserError(f"data.path file {str(path)!r} is not UTF-8 text ({e.reason})") from None


def _lines(f, path: Path) -> Iterator[str]:
    try:
        yield from f
    except UnicodeDecodeError as e:
        raise UserError(f"data.path file {str(path)!r} is not UTF-8 text ({e.reason})") from None


# --------------------------------------------------------------------------- identity


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits in it, else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def tokenizer_hash(tokenizer: TextTokenizer) -> str:
    """sha256 of the tokenizer's serialization, keys sorted: the same for a tokenizer just
    trained and for its tokenizer.json loaded again (DDP workers, later runs)."""
    config = json.loads(tokenizer.tokenizer.to_str())
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def sources(files: Sequence[Path]) -> list[dict[str, Any]]:
    """Each file's identity: absolute path, size and mtime (a change to either is a new cache)."""
    found = []
    for path in files:
        stat = Path(path).stat()
        found.append(
            {"path": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        )
    return found


def cache_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


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
) -> TokenCache:
    """The cache of `files` under `tokenizer`, built first if no complete, matching one exists.

    Args:
        files: the corpus, in order (text: concatenated; documents: one sentence per line).
        layout: "text" (one stream, split at the tail `val_fraction` of the characters) or
            "documents" (sentences of documents, split at the tail `val_fraction` of documents).
        cache_dir: where cache directories go (one per corpus x tokenizer x split settings).
        workers: encoding processes (None: every core this process may use).
        chunk_chars: characters per encoded chunk.
    """
    assert layout in LAYOUTS, layout
    identity = {
        "version": FORMAT_VERSION,
        "layout": layout,
        "sources": sources(files),
        "val_fraction": val_fraction,
        "tokenizer_sha256": tokenizer_hash(tokenizer),
    }
    directory = Path(cache_dir) / f"{layout}-{cache_key(identity)}"
    cache = _complete(directory, identity)
    if cache is None:
        with _locked(directory.with_name(directory.name + ".lock"), directory):
            cache = _complete(directory, identity)  # built while this process waited
            if cache is None:
                cache = _build(directory, identity, files, tokenizer, workers, chunk_chars)
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
    return cache if whole else None


@contextmanager
def _locked(lock_path: Path, directory: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("token cache: waiting for another process to build %s", directory)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(
    directory: Path,
    identity: dict[str, Any],
    files: Sequence[Path],
    tokenizer: TextTokenizer,
    workers: int | None,
    chunk_chars: int,
) -> TokenCache:
    started = time.perf_counter()
    directory.mkdir(parents=True, exist_ok=True)
    for stale in [*directory.glob("*.tmp"), directory / INDEX_FILE]:  # a killed build's leftovers
        stale.unlink(missing_ok=True)
    total_bytes = sum(s["size"] for s in identity["sources"])
    dtype = token_dtype(tokenizer.vocab_size)
    encoder = _Encoder(tokenizer, dtype, workers, total_bytes > 2 * chunk_chars)
    with encoder, _Progress(total_bytes) as progress:
        if identity["layout"] == "text":
            layout = _build_text(directory, files, identity, encoder, progress, chunk_chars)
        else:
            layout = _build_documents(directory, files, identity, encoder, progress, chunk_chars)
    if sources(files) != identity["sources"]:
        raise UserError(
            f"data.path: a file changed while its tokens were being cached in {directory}; "
            "run again once the files stay unchanged"
        )
    index = {
        "identity": identity,
        "dtype": dtype.name,
        "vocab_size": tokenizer.vocab_size,
        **layout,
    }
    atomic_write_bytes(directory / INDEX_FILE, json.dumps(index, indent=1).encode())
    seconds = time.perf_counter() - started
    log.info(
        "token cache: built in %.1f s (%.1f MB/s), %d tokens, %.1f MB in %s",
        seconds,
        total_bytes / 1e6 / max(seconds, 1e-9),
        index["tokens"],
        index["tokens"] * dtype.itemsize / 1e6,
        directory,
    )
    return TokenCache(directory, index)


def _build_text(directory, files, identity, encoder, progress, chunk_chars) -> dict[str, Any]:
    """One stream of ids: the training characters' then the validation characters'."""
    characters = count_chars(files)
    cut = int(characters * (1.0 - identity["val_fraction"]))  # as split_text cuts
    counts = []
    with _TmpWriter(directory / TOKENS_FILE) as out:
        for start, stop in ((0, cut), (cut, None)):
            chunks = cut_chunks(text_pieces(files, start, stop), chunk_chars)
            counts.append(sum(out.write(ids) for ids in encoder.map(progress.count(chunks))))
    return {
        "characters": characters,
        "train_characters": cut,
        "tokens": sum(counts),
        "train_tokens": counts[0],
    }


def _build_documents(directory, files, identity, encoder, progress, chunk_chars) -> dict[str, Any]:
    """Every sentence's ids, with the token offset of each sentence and the sentence offset of
    each document."""
    per_document = sentences_per_document(files)
    n_val = max(2, round(len(per_document) * identity["val_fraction"]))  # as DocumentsDataModule
    lengths: list[np.ndarray] = [np.zeros(1, np.int64)]
    with _TmpWriter(directory / TOKENS_FILE) as out:
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


def sentences_per_document(files: Sequence[Path]) -> np.ndarray:
    """How many sentences each document of `document_lines(files)` has, in order."""
    counts, current = array("q"), 0
    for line in document_lines(files):
        if line is None:
            counts.append(current)
            current = 0
        else:
            current += 1
    return np.asarray(counts, dtype=np.int64)


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


# --------------------------------------------------------------------------- encoding in parallel

_WORKER: dict[str, Any] = {}


def _start_worker(tokenizer_json: str, dtype: str) -> None:
    from tokenizers import Tokenizer

    _WORKER.update(tokenizer=TextTokenizer(Tokenizer.from_str(tokenizer_json)), dtype=dtype)


def _encode_item(item: str | list[str]) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """A text chunk's ids, or a batch of sentences' ids (concatenated) and their lengths."""
    tokenizer, dtype = _WORKER["tokenizer"], np.dtype(_WORKER["dtype"])
    if isinstance(item, str):
        return encode_chunk(tokenizer, item, dtype)
    encoded = tokenizer.encode_batch(item)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ids = np.fromiter((i for ids in encoded for i in ids), dtype=dtype, count=int(lengths.sum()))
    return ids, lengths


class _Encoder:
    """Encodes items in order, in a pool of processes (each loading the tokenizer from its JSON)
    with at most two items per process in flight, or in this process for a small corpus."""

    def __init__(self, tokenizer: TextTokenizer, dtype: np.dtype, workers: int | None, big: bool):
        self.workers = workers or len(os.sched_getaffinity(0))
        self.args = (tokenizer.tokenizer.to_str(), dtype.str)
        self.pool = None
        self.parallel = big and self.workers > 1

    def __enter__(self) -> _Encoder:
        if self.parallel:
            # fork, as DataLoader workers start: spawn would re-import the caller's __main__,
            # which fails for a script without an `if __name__ == "__main__"` guard. The
            # workers encode one text at a time, so tokenizers' own threads are not needed in
            # them; saying so keeps its "forked after parallelism" warning quiet.
            with _environment(TOKENIZERS_PARALLELISM="false"):
                context = multiprocessing.get_context("fork")
                self.pool = context.Pool(self.workers, _start_worker, self.args)
        else:
            _start_worker(*self.args)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
        _WORKER.clear()

    def map(self, items: Iterable[Any]) -> Iterator[Any]:
        if self.pool is None:
            yield from map(_encode_item, items)
            return
        pending: deque = deque()
        for item in items:
            pending.append(self.pool.apply_async(_encode_item, (item,)))
            if len(pending) >= 2 * self.workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Environment variables set for the block (child processes started in it inherit them)."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --------------------------------------------------------------------------- files and progress


class _TmpWriter:
    """Appends arrays to `path`.tmp, renamed to `path` once complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(path.name + ".tmp")

    def __enter__(self) -> _TmpWriter:
        self.file = open(self.tmp, "wb")
        return self

    def write(self, ids: np.ndarray) -> int:
        self.file.write(ids.tobytes())
        return len(ids)

    def __exit__(self, exc_type, *exc: object) -> None:
        self.file.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)


def _save_npy(path: Path, array_: np.ndarray) -> None:
    with atomic_path(path) as temporary, open(temporary, "wb") as f:
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
