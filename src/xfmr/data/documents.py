"""Documents of sentences for next-sentence prediction (Devlin et al. 2019, sec. 3.1): one
sentence per line, a blank line between documents; examples are sentence pairs (A, B, label)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from xfmr.data.base import ExamplesDataModule
from xfmr.data.files import read_utf8, text_files
from xfmr.errors import UserError
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
        self.anchors = [(d, i) for d, doc in enumerate(documents) for i in range(len(doc) - 1)]
        self.fixed: list[Pair] | None = None
        if seed is not None:
            generator = torch.Generator().manual_seed(seed)
            self.fixed = [draw_pair(documents, d, i, generator=generator) for d, i in self.anchors]

    def __len__(self) -> int:
        return len(self.anchors)

    def __getitem__(self, index: int) -> Pair:
        if self.fixed is not None:
            return self.fixed[index]
        return draw_pair(self.documents, *self.anchors[index])


class DocumentsDataModule(ExamplesDataModule):
    """Documents split into training and validation by document; the tokenizer is trained on
    the training documents only.

    Args:
        path: a file, a directory (its `*.txt` files, sorted) or a list of either; one sentence
            per line, a blank line between documents (a file's end also ends one).
        val_fraction: the tail fraction of the documents used for validation (at least two).
        batch_size: sentence pairs per batch (per process under DDP).
        num_workers: DataLoader workers.
        val_seed: the seed the validation pairs are drawn with, once.
    """

    def __init__(
        self,
        *,
        path: str | Sequence[str] | None = None,
        val_fraction: float = 0.1,
        batch_size: int = 32,
        num_workers: int = 0,
        val_seed: int = 0,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers)
        if not 0.0 < val_fraction < 1.0:
            raise UserError(f"data.val_fraction={val_fraction} must lie in (0, 1)")
        if int(batch_size) < 1:
            raise UserError(f"data.batch_size={batch_size} must be a positive integer")
        self.path = path
        self.val_fraction = val_fraction
        self.val_seed = val_seed
        self._split: tuple[list[list[str]], list[list[str]]] | None = None
        self.train_set: SentencePairDataset | None = None
        self.val_set: SentencePairDataset | None = None

    def documents(self) -> tuple[list[list[str]], list[list[str]]]:
        """(train, val) documents of sentences; too few of either is refused."""
        if self._split is None:
            documents = read_documents(text_files(self.path))
            n_val = max(2, round(len(documents) * self.val_fraction))
            train, val = documents[:-n_val], documents[-n_val:]
            if len(train) < 2:
                raise UserError(
                    f"data.path={self.path!r} holds {len(documents)} documents; next-sentence "
                    f"pairs need two or more in training and in validation "
                    f"(data.val_fraction={self.val_fraction} keeps {n_val}): separate documents "
                    f"with a blank line, or give more"
                )
            for name, split in (("training", train), ("validation", val)):
                if not any(len(doc) >= 2 for doc in split):
                    raise UserError(
                        f"data.path={self.path!r}: no {name} document has two sentences or more, "
                        f"so there is no next sentence to predict; put one sentence per line"
                    )
            self._split = (train, val)
        return self._split

    def split_text(self) -> tuple[str, str]:
        """(train, val) text, one sentence per line; the tokenizer is trained on the first only."""
        return tuple("\n".join(s for doc in split for s in doc) for split in self.documents())

    def attach(
        self, tokenizer: TextTokenizer, collate_fn: Callable[[list[Any]], dict[str, torch.Tensor]]
    ) -> None:
        """Encode every sentence with `tokenizer`; batches are made by the objective's `collate_fn`."""
        train, val = (_encode(tokenizer, split) for split in self.documents())
        self.train_set = SentencePairDataset(train)
        self.val_set = SentencePairDataset(val, seed=self.val_seed)
        self.collate_fn = collate_fn

    def _loader(self, dataset: Dataset | None, *, shuffle: bool) -> DataLoader:
        if dataset is None or self.collate_fn is None:
            raise RuntimeError(
                "attach(tokenizer, collate_fn) must be called before the loaders are built"
            )
        return super()._loader(dataset, shuffle=shuffle)


def _encode(tokenizer: TextTokenizer, documents: list[list[str]]) -> list[Document]:
    ids = iter(tokenizer.encode_batch([s for doc in documents for s in doc]))
    return [[next(ids) for _ in doc] for doc in documents]
