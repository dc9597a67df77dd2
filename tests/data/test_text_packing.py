"""A text corpus of documents (data.document_separator, data.documents_per_file) and
data.packing=true on it: where documents end, each encoded alone, the token cache keyed by the
setting, blocks that carry each token's document, and the refusals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.config import compose_config
from xfmr.data.config import DataConfig
from xfmr.data.text import TextCorpusDataModule
from xfmr.errors import UserError
from xfmr.objectives.clm import CausalLMObjective
from xfmr.text.document_text import encode_texts, split_documents
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

SEPARATOR = "<|endoftext|>"
STORIES = [
    "the quick brown fox jumps over the lazy dog. ",
    "a small cat sees a big bird near the river, and the bird flies off. ",
    "two owls watch the quiet moon at night. ",
    "one dog. ",
]


def _corpus(tmp_path: Path, copies: int = 12) -> tuple[Path, Path]:
    """The same documents written once with separators into one file, and once a file each."""
    joined = tmp_path / "joined.txt"
    joined.write_text("".join(f"{s}{SEPARATOR}\n" for s in STORIES * copies))
    folder = tmp_path / "files"
    folder.mkdir()
    for i, story in enumerate(STORIES * copies):
        (folder / f"{i:03d}.txt").write_text(story)
    return joined, folder


def _tokenizer(text: str):
    return train_tokenizer(TokenizerSpec(kind="char"), iter([text]))


def _data(path: Path, **options) -> TextCorpusDataModule:
    return TextCorpusDataModule(path=str(path), **{"block_size": 16, "batch_size": 4, **options})


def test_documents_end_after_each_separator_and_at_file_ends():
    pieces = ["ab<|e", "|>cd<|e|>e", None, "fg"]
    assert list(split_documents(pieces, "<|e|>")) == [
        ("ab<|e|>", True),
        ("cd<|e|>", True),
        ("e", True),
        ("fg", True),
    ]
    # A long document comes in segments cut between words, none ending it but its last.
    segments = list(split_documents(["aaa bbb ccc ddd eee"], None, chunk_chars=5))
    assert "".join(s for s, _ in segments) == "aaa bbb ccc ddd eee"
    assert [end for _, end in segments] == [False] * (len(segments) - 1) + [True]
    # No cut where a separator may still begin.
    assert list(split_documents(["aaa bbb SEP ccc ddd"], " SEP", chunk_chars=5))[0] == (
        "aaa bbb SEP",
        True,
    )


def test_each_document_is_encoded_alone(tmp_path):
    joined, _ = _corpus(tmp_path)
    tokenizer = _tokenizer(joined.read_text())
    ids, lengths = encode_texts(tokenizer, ["one dog. ", "", "two owls"])
    assert lengths.tolist() == [9, 0, 8] and len(ids) == 17


@pytest.mark.parametrize("cache", [False, True])
def test_blocks_carry_each_tokens_document(tmp_path, cache):
    joined, _ = _corpus(tmp_path)
    tokenizer = _tokenizer(joined.read_text())
    options = {"cache": cache, "cache_dir": str(tmp_path / "tokens")} if cache else {}
    data = _data(joined, document_separator=SEPARATOR, packing=True, **options)
    objective = CausalLMObjective()
    data.attach(tokenizer, objective.collate)
    separator_id = tokenizer.encode(SEPARATOR)[-1]
    train = [step[0] for step, _ in zip(data.train_dataloader(), range(8), strict=False)]
    for batch in [*train, *data.val_dataloader()]:
        ids, documents, labels = batch["input_ids"], batch["document_ids"], batch["labels"]
        assert documents.shape == ids.shape and (documents[:, 0] == 0).all()
        new = documents[:, 1:] != documents[:, :-1]
        # A document starts after a separator's last token; that token predicts nothing.
        assert (ids[:, :-1][new] == separator_id).all()
        assert (labels[:, :-1][new] == -100).all()
        assert int((labels != -100).sum()) == labels.numel() - int(new.sum()) - _ends(batch)
    assert any((b["document_ids"] > 0).any() for b in train)  # blocks of 16, documents < 90


def _ends(batch) -> int:
    """Rows whose last target is the first token of the next block's document (the block's
    extra token starts a document): not counted either."""
    return int((batch["labels"][:, -1] == -100).sum())


@pytest.mark.parametrize("val_batches", [None, 2])
def test_validation_coverage_counts_the_tokens_packed_windows_predict(tmp_path, val_batches):
    """val_coverage's `tokens` are the targets the validation loader's packed windows count: a
    document's last token predicts nothing, so fewer than windows x block_size."""
    joined, _ = _corpus(tmp_path, copies=6)  # 10 windows of the split, 4 within 2 batches
    options = dict(block_size=64, batch_size=2, val_fraction=0.5, val_batches=val_batches)
    data = _data(joined, document_separator=SEPARATOR, packing=True, **options)
    data.attach(_tokenizer(joined.read_text()), CausalLMObjective().collate)
    batches = list(data.val_dataloader())
    counted = [int((batch["labels"] != -100).sum()) for batch in batches]
    coverage = data.val_coverage()
    assert coverage["windows"] == sum(len(batch["labels"]) for batch in batches)
    assert coverage["tokens"] == sum(counted) < coverage["windows"] * 64
    assert data.val_coverage(batches=1)["tokens"] == counted[0]


def test_the_cache_equals_the_in_memory_path_and_is_keyed_by_the_documents(tmp_path):
    joined, folder = _corpus(tmp_path)
    tokenizer = _tokenizer(joined.read_text())
    cache_dir = tmp_path / "tokens"
    for path, options in (
        (joined, {"document_separator": SEPARATOR}),
        (folder, {"documents_per_file": True}),
        (folder, {"documents_per_file": True, "document_separator": "owls"}),
    ):
        memory, cached = (
            _data(path, **options),
            _data(path, cache=True, cache_dir=str(cache_dir), **options),
        )
        for data in (memory, cached):
            data.attach(tokenizer, CausalLMObjective().collate)
        for split in ("train", "val"):
            assert np.array_equal(memory.starts[split], cached.starts[split]), (options, split)
        assert torch.equal(memory.train_ids, torch.from_numpy(cached.train_ids[:].astype(np.int64)))
    stream = _data(folder, cache=True, cache_dir=str(cache_dir))
    stream.attach(tokenizer, CausalLMObjective().collate)
    # One cache per documents setting, and the stream's own, named as it always was.
    assert len([p for p in cache_dir.iterdir() if p.is_dir()]) == 4


def test_files_as_documents_start_a_document_at_each_file(tmp_path):
    _, folder = _corpus(tmp_path, copies=2)
    data = _data(folder, documents_per_file=True, val_fraction=0.3, block_size=8)
    data.attach(_tokenizer("".join(STORIES)), CausalLMObjective().collate)
    lengths = np.diff(
        np.concatenate([data.starts["train"], data.starts["val"][1:] + len(data.train_ids)])
    )
    expected = [len(s) for s in STORIES * 2]
    # The split cuts one document in two; every other is a file.
    assert lengths.sum() == sum(expected) and len(lengths) == len(expected) + 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"packing": True},
            "data.packing=true: a text corpus packs documents, and this one has none",
        ),
        ({"document_separator": ""}, "data.document_separator='' is not valid"),
        ({"documents_per_file": "yes"}, "data.documents_per_file='yes' is not valid"),
    ],
)
def test_bad_document_settings_are_refused_at_config_time(tmp_path, settings, message):
    joined, _ = _corpus(tmp_path, copies=1)
    values = {"_target_": "xfmr.data.text.TextCorpusDataModule", "path": str(joined), **settings}
    with pytest.raises(UserError, match=message):
        DataConfig.read(values)
    with pytest.raises(UserError, match=message):
        TextCorpusDataModule(path=str(joined), **settings)


def test_packing_is_refused_on_an_rnn_whose_state_runs_across_documents(tmp_path):
    joined, _ = _corpus(tmp_path, copies=1)
    with pytest.raises(UserError, match="data.packing=true: arch=rnn carries its state"):
        compose_config(
            tmp_path,
            [
                "data=text",
                f"data.path={joined}",
                f"data.document_separator='{SEPARATOR}'",
                "data.packing=true",
                "arch=rnn",
                "pos=none",
            ],
        )


def test_documents_per_file_needs_files():
    from xfmr.data.synthetic import SyntheticCorpusDataModule

    data = SyntheticCorpusDataModule(n_sentences=50, documents_per_file=True, block_size=8)
    with pytest.raises(UserError, match="data.documents_per_file=true needs data.path files"):
        data.attach(_tokenizer("abc"), CausalLMObjective().collate)


def test_a_packed_clm_run_trains(tmp_path):
    """Documents packed into blocks (their ends at the separator): the model learns them, its
    validation loss (per document, `document_ids` on the validation blocks too) falling."""
    from xfmr.training.run import run_training

    joined, _ = _corpus(tmp_path, copies=30)
    config = compose_config(
        tmp_path,
        [
            "data=text",
            f"data.path={joined}",
            f"data.document_separator='{SEPARATOR}'",
            "data.packing=true",
            "data.block_size=32",
            "data.cache=false",
            "size=tiny",
            "tokenizer=char",
            "optim.lr=3e-3",
            "trainer.max_steps=20",
            "trainer.val_check_interval=10",
            "trainer.limit_val_batches=2",
        ],
    )
    results = run_training(config)
    losses = [h["val/loss"] for h in results["history"]]
    assert len(losses) == 2 and all(map(math.isfinite, losses))
    assert losses[-1] < losses[0] - 0.2, losses  # steps 10 to 20 of a char model: 2.7 -> 2.4
