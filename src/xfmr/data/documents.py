"""Documents of sentences for next-sentence prediction (Devlin et al. 2019, sec. 3.1): one
sentence per line, a blank line between documents; examples are sentence pairs (A, B, label)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from xfmr.data.base import ExamplesDataModule, cache_setting, require_positive
from xfmr.data.files import read_utf8, text_files
from xfmr.data.settings import AUTO_WORKERS
from xfmr.errors import UserError
from xfmr.text.corpus_files import READ_CHARS, document_lines, sentences_per_document
from xfmr.text.sample import head
from xfmr.text.token_cache import MappedIds, TokenCache, open_or_build
from xfmr.text.tokenizers import TextTokenizer

# Next-sentence labels as BERT's checkpoints (and HF's `next_sentence_label`) use them.
IS_NEXT, NOT_NEXT = 0, 1

Document = list[list[int]]  # a document's sentences, as token ids
Pair = tuple[list[int], list[int], int]  # (sentence A, sentence B, IS_NEXT or NOT_NEXT)


def read_documents(files: Sequence[Path]) -> list[list[str]]:
    """Each file's documents: runs of non-blank lines (stripped); a file's end ends a document."""
    documents: list[list[str]] = []
    for f in files:
        text = read_utf8(f)
        current: list[str] = []
        for line in [*text.splitlines(), ""]:
            if line.strip():
                current.append(line.strip())
            elif current:
                documents.append(current)
                current = []
    return documents


def draw_pair(
    documents: Sequence[Document],
    doc: int,
    sentence: int,
    *,
    generator: torch.Generator | None = None,
) -> Pair:
    """Sentence `sentence` of document `doc` as A; B is the sentence after it half of the time
    (IS_NEXT), otherwise a random sentence of a random other document (NOT_NEXT)."""
    first = documents[doc][sentence]
    if torch.rand((), generator=generator).item() < 0.5:
        return first, documents[doc][sentence + 1], IS_NEXT
    other = int(torch.randint(len(documents) - 1, (), generator=generator))
    other += other >= doc  # any document but `doc`
    pick = int(torch.randint(len(documents[other]), (), generator=generator))
    return first, documents[other][pick], NOT_NEXT


class MappedDocuments(Sequence):
    """Documents `first:stop` of a documents token cache: `documents[d][s]` is sentence `s` of
    document `d`, its ids read from the memory map when asked for (a list, as `_encode` gives)."""

    def __init__(self, cache: TokenCache, first: int, stop: int) -> None:
        self.ids: MappedIds = cache.ids(0, cache.index["tokens"])
        self.directory = cache.directory
        self.first, self.stop = first, stop
        self._offsets: tuple[np.ndarray, np.ndarray] | None = None

    def offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """(each sentence's first token, each document's first sentence), memory-mapped."""
        if self._offsets is None:
            cache = TokenCache(self.directory, {})
            self._offsets = (cache.sentence_offsets(), cache.document_offsets())
        return self._offsets

    def __len__(self) -> int:
        return self.stop - self.first

    def __getitem__(self, doc: int) -> _MappedDocument:
        if not 0 <= doc < len(self):
            raise IndexError(doc)
        documents = self.offsets()[1]
        return _MappedDocument(
            self, int(documents[self.first + doc]), int(documents[self.first + doc + 1])
        )

    def sentence(self, index: int) -> list[int]:
        sentences = self.offsets()[0]
        return self.ids[int(sentences[index]) : int(sentences[index + 1])].tolist()

    def __getstate__(self) -> dict[str, Any]:  # a DataLoader worker maps the files itself
        return {**self.__dict__, "_offsets": None}


class _MappedDocument(Sequence):
    def __init__(self, documents: MappedDocuments, first: int, stop: int) -> None:
        self.documents, self.first, self.stop = documents, first, stop

    def __len__(self) -> int:
        return self.stop - self.first

    def __getitem__(self, sentence: int) -> list[int]:
        if not 0 <= sentence < len(self):
            raise IndexError(sentence)
        return self.documents.sentence(self.first + sentence)


class SentencePairDataset(Dataset):
    """One example per sentence that has a next one in its document: `draw_pair` of it.

    With `seed`, pairs are drawn once (validation: the same pairs at every evaluation). Without,
    every access draws afresh from torch's global generator, which the run seeds with `seed`
    (DataLoader workers too), so training pairs are re-drawn every epoch, reproducibly.
    """

    def __init__(self, documents: Sequence[Document], *, seed: int | None = None) -> None:
        if len(documents) < 2:
            raise ValueError("random sentences come from another document: give two or more")
        self.documents = documents
        # Anchors (sentences with a next one), document by document, as the end of each
        # document's run: memory grows with the documents, not with the sentences.
        self.ends = np.cumsum([max(0, len(doc) - 1) for doc in documents])
        self.fixed: list[Pair] | None = None
        if seed is not None:
            generator = torch.Generator().manual_seed(seed)
            self.fixed = [
                draw_pair(documents, *self.anchor(i), generator=generator) for i in range(len(self))
            ]

    def anchor(self, index: int) -> tuple[int, int]:
        """(document, sentence) of anchor `index`."""
        doc = int(np.searchsorted(self.ends, index, side="right"))
        return doc, index - (int(self.ends[doc - 1]) if doc else 0)

    def __len__(self) -> int:
        return int(self.ends[-1])

    def __getitem__(self, index: int) -> Pair:
        if self.fixed is not None:
            return self.fixed[index]
        return draw_pair(self.documents, *self.anchor(index))


class DocumentsDataModule(ExamplesDataModule):
    """Documents split into training and validation by document; the tokenizer is trained on
    the training documents only.

    Args:
        path: a file, a directory (its `*.txt` files, sorted) or a list of either; one sentence
            per line, a blank line between documents (a file's end also ends one).
        val_fraction: the tail fraction of the documents used for validation (at least two).
        batch_size: sentence pairs per batch (per process under DDP).
        num_workers: DataLoader worker processes, or "auto" (`xfmr.data.loading`).
        val_seed: the seed the validation pairs are drawn with, once.
        cache: encode the sentences once per tokenizer into `cache_dir` and memory-map them
            (xfmr.text.token_cache); false encodes them in memory in every run.
        cache_dir: where token caches go (conf: `${paths.cache_dir}/tokens`).
        packing: several pairs share each row (`xfmr.objectives.packing`), each attending
            within itself: objective=mlm_nsp and nsp.
    """

    gives = "documents"  # the kind of examples, xfmr.kinds

    def __init__(
        self,
        *,
        path: str | Sequence[str] | None = None,
        val_fraction: float = 0.1,
        batch_size: int = 32,
        num_workers: int | str = AUTO_WORKERS,
        val_seed: int = 0,
        cache: bool = False,
        cache_dir: str | None = None,
        packing: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers, packing=packing)
        if not 0.0 < val_fraction < 1.0:
            raise UserError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
        require_positive(batch_size=batch_size)
        self.path = path
        self.val_fraction = val_fraction
        self.val_seed = val_seed
        self.cache = cache_setting(cache, cache_dir)
        self.cache_dir = cache_dir
        self._split: tuple[list[list[str]], list[list[str]]] | None = None
        self.train_set: SentencePairDataset | None = None
        self.val_set: SentencePairDataset | None = None

    def documents(self) -> tuple[list[list[str]], list[list[str]]]:
        """(train, val) documents of sentences; too few of either is refused."""
        if self._split is None:
            documents = read_documents(text_files(self.path))
            n_train = self._check_split([len(doc) for doc in documents])
            self._split = (documents[:n_train], documents[n_train:])
        return self._split

    def _check_split(self, sentences_per_document: Sequence[int]) -> int:
        """How many documents train, given each document's sentence count; too few documents,
        or no document with a next sentence in a split, is refused."""
        n_documents = len(sentences_per_document)
        n_val = max(2, round(n_documents * self.val_fraction))
        n_train = max(0, n_documents - n_val)
        if n_train < 2:
            raise UserError(
                f"data.path={self.path!r} holds {n_documents} documents; next-sentence "
                f"pairs need two or more in training and in validation "
                f"(data.val_fraction={self.val_fraction} keeps {n_val}): separate documents "
                f"with a blank line, or give more"
            )
        splits = (sentences_per_document[:n_train], sentences_per_document[n_train:])
        for name, split in zip(("training", "validation"), splits, strict=True):
            if not any(count >= 2 for count in split):
                raise UserError(
                    f"data.path={self.path!r}: no {name} document has two sentences or more, "
                    f"so there is no next sentence to predict; put one sentence per line"
                )
        return n_train

    def training_text_sample(self, max_bytes: int) -> Iterator[str]:
        """The head of `split_text()`'s training half, at most `max_bytes` of UTF-8, in pieces;
        read from the files a line at a time when the token cache is on."""
        if not self.cache:
            return head([self.split_text()[0]], max_bytes)
        files = text_files(self.path)
        n_train = self._check_split(sentences_per_document(files).tolist())
        return head(_joined_lines(document_lines(files), n_train), max_bytes)

    def split_text(self) -> tuple[str, str]:
        """(train, val) text, one sentence per line; the tokenizer is trained on the first only."""
        return tuple("\n".join(s for doc in split for s in doc) for split in self.documents())

    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]],
        *,
        window: int = 1,
    ) -> None:
        """Encode every sentence with `tokenizer` (or memory-map them from the token cache);
        batches are made by the objective's `collate_fn`, training batches handed out `window`
        at a time (one optimizer step's, gradient accumulation)."""
        if self.cache:
            train, val = self._mapped_documents(tokenizer)
        else:
            train, val = (_encode(tokenizer, split) for split in self.documents())
        self.train_set = SentencePairDataset(train)
        self.val_set = SentencePairDataset(val, seed=self.val_seed)
        self.collate_fn = collate_fn
        self.window = window

    def _mapped_documents(
        self, tokenizer: TextTokenizer
    ) -> tuple[MappedDocuments, MappedDocuments]:
        cache = open_or_build(
            text_files(self.path),
            tokenizer,
            layout="documents",
            val_fraction=self.val_fraction,
            cache_dir=self.cache_dir,
        )
        n_train = self._check_split(np.diff(cache.document_offsets()).tolist())
        assert n_train == cache.index["train_documents"], (n_train, cache.index)
        self._split = None  # the tokenizer's training text, if it was read, is not needed
        return MappedDocuments(cache, 0, n_train), MappedDocuments(
            cache, n_train, cache.index["documents"]
        )

    def _loader(self, dataset: Dataset | None, *, shuffle: bool) -> DataLoader:
        if dataset is None or self.collate_fn is None:
            raise RuntimeError(
                "attach(tokenizer, collate_fn) must be called before the loaders are built"
            )
        return super()._loader(dataset, shuffle=shuffle)


def _joined_lines(lines: Iterator[str | None], n_documents: int) -> Iterator[str]:
    """The sentences of the first `n_documents` of `lines` joined by newlines, in pieces of
    about READ_CHARS characters."""
    piece: list[str] = []
    size = done = 0
    separator = ""  # the newline between one piece's last sentence and the next's first
    for line in lines:
        if line is None:
            done += 1
            if done == n_documents:
                break
            continue
        piece.append(line)
        size += len(line) + 1
        if size >= READ_CHARS:
            yield separator + "\n".join(piece)
            piece, size, separator = [], 0, "\n"
    if piece:
        yield separator + "\n".join(piece)


def _encode(tokenizer: TextTokenizer, documents: list[list[str]]) -> list[Document]:
    ids = iter(tokenizer.encode_batch([s for doc in documents for s in doc]))
    return [[next(ids) for _ in doc] for doc in documents]
