"""A corpus encoded in a pool of processes, each loading the tokenizer from its JSON, the
results handed back in order; a small corpus is encoded in this process."""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from xfmr.text.chunks import encode_chunk
from xfmr.text.document_text import encode_texts
from xfmr.text.tokenizers import TextTokenizer

_WORKER: dict[str, Any] = {}


def _start_worker(tokenizer_json: str, dtype: str) -> None:
    from tokenizers import Tokenizer

    _WORKER.update(tokenizer=TextTokenizer(Tokenizer.from_str(tokenizer_json)), dtype=dtype)


def _encode_item(
    item: str | list[str] | tuple[str, ...],
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """A text chunk's ids; or a batch's ids (concatenated) and their lengths: a list of
    sentences, or a tuple of documents' segments (each encoded alone, however long,
    `xfmr.text.document_text.encode_texts`)."""
    tokenizer, dtype = _WORKER["tokenizer"], np.dtype(_WORKER["dtype"])
    if isinstance(item, str):
        return encode_chunk(tokenizer, item, dtype)
    if isinstance(item, tuple):
        return encode_texts(tokenizer, item, dtype)
    encoded = tokenizer.encode_batch(item)
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    ids = np.fromiter((i for ids in encoded for i in ids), dtype=dtype, count=int(lengths.sum()))
    return ids, lengths


class Encoder:
    """Encodes items in order, in a pool of processes (each loading the tokenizer from its JSON)
    with at most two items per process in flight, or in this process for a small corpus."""

    def __init__(self, tokenizer: TextTokenizer, dtype: np.dtype, workers: int | None, big: bool):
        self.workers = workers or len(os.sched_getaffinity(0))
        self.args = (tokenizer.tokenizer.to_str(), dtype.str)
        self.pool = None
        self.parallel = big and self.workers > 1

    def __enter__(self) -> Encoder:
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
