"""Validation batches draw their random numbers (MLM masks, T5's noise spans, the masks of
BERT's sentence pairs) from the run's seed and the batch's examples alone: the same batches
with `data.num_workers=0` as with 2 (before, each worker drew from its own generator, seeded
from the training process's), the same at every validation, and the training process's
generators left as they were."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from xfmr.data.documents import DocumentsDataModule
from xfmr.data.text import TextCorpusDataModule
from xfmr.objectives.mlm import MaskedLMObjective
from xfmr.objectives.nsp import MaskedLMNextSentenceObjective
from xfmr.objectives.span_corruption import SpanCorruptionObjective
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

SENTENCES = [f"sentence {i} of the quick brown fox over the lazy dog" for i in range(40)]


def _text_module(tmp_path: Path, objective, specials: tuple[str, ...]) -> Callable:
    text = " ".join(SENTENCES)
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    spec = TokenizerSpec(kind="char", special_tokens=("<unk>", *specials))
    tokenizer = train_tokenizer(spec, iter([text]))
    objective.bind(tokenizer)

    def module(num_workers: int) -> TextCorpusDataModule:
        data = TextCorpusDataModule(
            path=str(path), val_fraction=0.3, block_size=64, batch_size=4, num_workers=num_workers
        )
        data.attach(tokenizer, objective.collate)
        return data

    return module


def mlm(tmp_path: Path) -> Callable:
    return _text_module(tmp_path, MaskedLMObjective(), ("[MASK]",))


def span_corruption(tmp_path: Path) -> Callable:
    objective = SpanCorruptionObjective(n_sentinels=8)
    return _text_module(tmp_path, objective, objective.required_special_tokens)


def mlm_nsp(tmp_path: Path) -> Callable:
    documents = "\n\n".join("\n".join(SENTENCES[i : i + 4]) for i in range(0, 40, 4))
    path = tmp_path / "documents.txt"
    path.write_text(documents + "\n")
    objective = MaskedLMNextSentenceObjective(max_length=48)
    spec = TokenizerSpec(kind="char", special_tokens=("<unk>", *objective.required_special_tokens))
    tokenizer = train_tokenizer(spec, iter([documents]))
    objective.bind(tokenizer)

    def module(num_workers: int) -> DocumentsDataModule:
        data = DocumentsDataModule(
            path=str(path), val_fraction=0.5, batch_size=4, num_workers=num_workers
        )
        data.attach(tokenizer, objective.collate)
        return data

    return module


def _batches(data) -> list[dict[str, torch.Tensor]]:
    return list(data.val_dataloader())


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("objective", [mlm, span_corruption, mlm_nsp])
def test_validation_batches_do_not_depend_on_the_loader_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, objective: Callable
) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")
    module = objective(tmp_path)
    torch.manual_seed(0)  # the training process's state, which a worker's seed came from
    in_process = _batches(module(0))
    assert len(in_process) >= 2
    torch.manual_seed(1)  # another state: nothing may follow it
    assert _same(_batches(module(2)), in_process)
    assert _same(_batches(module(0)), in_process)  # the same at every validation
    monkeypatch.setenv("PL_GLOBAL_SEED", "8")
    assert not _same(_batches(module(0)), in_process)  # the run's seed decides them


def test_a_validation_leaves_the_training_process_generators_as_they_were(
    tmp_path: Path,
) -> None:
    data = mlm(tmp_path)(0)
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    kept = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    _batches(data)
    assert torch.equal(torch.get_rng_state(), kept[0])
    assert np.array_equal(np.random.get_state()[1], kept[1]) and random.getstate() == kept[2]
