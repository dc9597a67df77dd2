"""Parallel corpora (source -> target pairs) for sequence-to-sequence objectives."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from xfmr.data.base import ExamplesDataModule
from xfmr.data.formats.parallel import read_parallel, read_parallel_jsonl
from xfmr.data.settings import AUTO_WORKERS, parallel_files
from xfmr.data.synthetic import sentence
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")


class ParallelDataModule(ExamplesDataModule):
    """Source -> target pairs for training and validation, from aligned line files or from JSON
    Lines (exactly one of the two); a shared tokenizer is trained on both sides of the training
    pairs (the original Transformer's shared BPE vocabulary).

    Args:
        train_source, train_target, val_source, val_target: aligned text files.
        train_path, val_path: JSON Lines files instead, one object per pair.
        source_field, target_field: the keys of a pair's two sides in those objects.
        max_length: tokens kept per side (longer sentences are cut); None keeps them whole.
        batch_size: pairs per batch (per process under DDP).
        packing: several examples share each row (`xfmr.objectives.packing`).
        on_bad_row: "error" stops at an empty line or field with its file and line; "skip"
            drops the pair and logs how many were dropped and why.
    """

    gives = "pairs"  # the kind of examples, xfmr.kinds

    def __init__(
        self,
        *,
        train_source: str | None = None,
        train_target: str | None = None,
        val_source: str | None = None,
        val_target: str | None = None,
        train_path: str | None = None,
        val_path: str | None = None,
        source_field: str = "source",
        target_field: str = "target",
        max_length: int | None = 128,
        batch_size: int = 64,
        num_workers: int | str = AUTO_WORKERS,
        on_bad_row: str = "error",
        packing: bool = False,
    ) -> None:
        super().__init__(batch_size=batch_size, num_workers=num_workers, packing=packing)
        self.on_bad_row = on_bad_row
        self.files = {
            "train_source": train_source,
            "train_target": train_target,
            "val_source": val_source,
            "val_target": val_target,
            "train_path": train_path,
            "val_path": val_path,
        }
        self.fields = (source_field, target_field)
        self.max_length = max_length
        self._pairs: tuple[list[tuple[str, str]], list[tuple[str, str]]] | None = None
        self.train_pairs: list[tuple[list[int], list[int]]] = []
        self.val_pairs: list[tuple[list[int], list[int]]] = []

    def read_pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        keys = parallel_files(self.files)  # one of the two ways, else a UserError
        paths = [self.files[key] for key in keys]
        if "train_path" in keys:  # JSON Lines
            train, skipped = read_parallel_jsonl(paths[0], *self.fields, on_bad_row=self.on_bad_row)
            val, skipped_val = read_parallel_jsonl(
                paths[1], *self.fields, on_bad_row=self.on_bad_row
            )
        else:
            train, skipped = read_parallel(*paths[:2], on_bad_row=self.on_bad_row)
            val, skipped_val = read_parallel(*paths[2:], on_bad_row=self.on_bad_row)
        for report in (skipped, skipped_val):
            if len(report):
                log.warning("%s", report.summary())
        return train, val

    def pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        if self._pairs is None:
            self._pairs = self.read_pairs()
        return self._pairs

    def split_text(self) -> tuple[str, str]:
        """(train, val) text, both sides: what the shared tokenizer is trained on."""
        train, val = self.pairs()
        return "\n".join(s + "\n" + t for s, t in train), "\n".join(s + "\n" + t for s, t in val)

    def attach(
        self,
        tokenizer: TextTokenizer,
        collate_fn: Callable[[list[Any]], dict],
        *,
        window: int = 1,
    ) -> None:
        train, val = self.pairs()
        self.train_pairs = self._encode(tokenizer, train)
        self.val_pairs = self._encode(tokenizer, val)
        self.collate_fn = collate_fn
        self.window = window

    def _encode(self, tokenizer: TextTokenizer, pairs: list[tuple[str, str]]) -> list:
        sources = tokenizer.encode_batch([s for s, _ in pairs])
        targets = tokenizer.encode_batch([t for _, t in pairs])
        cut = self.max_length
        return [(s[:cut], t[:cut]) for s, t in zip(sources, targets, strict=True)]

    # Batches come from `train_pairs` and `val_pairs`, not `train_set`/`val_set`: evaluation
    # decodes `val_pairs`.
    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_pairs, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_pairs, shuffle=False)


def toy_translation(text: str) -> str:
    """The toy language's "translation": words in reverse order, each spelled backwards."""
    return " ".join(word[::-1] for word in reversed(text.rstrip(".").split())) + " ."


class SyntheticTranslationDataModule(ParallelDataModule):
    """Pairs of toy-language sentences and their `toy_translation`, generated in code."""

    def __init__(
        self, *, n_pairs: int = 5000, val_fraction: float = 0.1, corpus_seed: int = 0, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.n_pairs = n_pairs
        self.val_fraction = val_fraction
        self.corpus_seed = corpus_seed

    def read_pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        rng = random.Random(self.corpus_seed)
        pairs = [(s, toy_translation(s)) for s in (sentence(rng) for _ in range(self.n_pairs))]
        cut = int(len(pairs) * (1 - self.val_fraction))
        return pairs[:cut], pairs[cut:]
