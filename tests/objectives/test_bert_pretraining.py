"""BERT pre-training: the MLM head model, whole-word masking, next-sentence pairs from documents,
and MLM + NSP runs whose weights move between objective=mlm, mlm_nsp and nsp."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from xfmr.data.documents import (
    IS_NEXT,
    NOT_NEXT,
    DocumentsDataModule,
    SentencePairDataset,
    read_documents,
)
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.nn.encoder import EncoderLM
from xfmr.nn.heads import EncoderMaskedLM, EncoderNextSentence, EncoderPretraining
from xfmr.objectives import IGNORE_INDEX
from xfmr.objectives.mlm import MaskedLMObjective, TokenMasker, number_words
from xfmr.objectives.nsp import sentence_pair_inputs, truncate_pair
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

VOCAB, D = 50, 32


def _config(**overrides) -> ModelConfig:
    values = dict(vocab_size=VOCAB, arch="encoder", n_layers=2, n_heads=2, d_model=D)
    values.update(type_vocab_size=2, embed_norm=True, placement="post", norm_eps=1e-12)
    return ModelConfig(**{**values, **overrides})


# -- the MLM head model ------------------------------------------------------------------------


def test_mlm_head_model_shapes_tying_and_names_shared_with_encoder_pretraining() -> None:
    torch.manual_seed(0)
    model = EncoderMaskedLM(_config()).eval()
    ids = torch.randint(0, VOCAB, (3, 7))
    assert model(ids).shape == (3, 7, VOCAB)
    assert model.mlm.decoder.weight is model.backbone.tok_emb.weight
    untied = EncoderMaskedLM(_config(tie_embeddings=False))
    assert untied.mlm.decoder.weight is not untied.backbone.tok_emb.weight
    # Tied: the head adds dense (d*d + d), norm (2d) and the output bias (V), nothing more.
    head = D * D + D + 2 * D + VOCAB
    assert model.num_parameters() == model.backbone.num_parameters() + head
    assert untied.num_parameters() == model.num_parameters() + VOCAB * D

    full = EncoderPretraining(_config()).eval()
    names = set(full.state_dict())
    assert set(model.state_dict()) == {n for n in names if not n.startswith(("pooler.", "nsp."))}
    nsp_only = EncoderNextSentence(_config())
    assert set(nsp_only.state_dict()) == {n for n in names if not n.startswith("mlm.")}
    # Weights move: the MLM model with EncoderPretraining's weights gives its MLM logits.
    model.load_state_dict({n: t for n, t in full.state_dict().items() if n in model.state_dict()})
    mlm_logits, nsp_logits = full(ids)
    torch.testing.assert_close(model(ids), mlm_logits, rtol=0, atol=0)
    assert nsp_logits.shape == (3, 2)


def test_objective_head_picks_the_model() -> None:
    assert type(MaskedLMObjective().build_model(_config())) is EncoderMaskedLM
    assert type(MaskedLMObjective(head="linear").build_model(_config())) is EncoderLM
    with pytest.raises(
        ValueError, match=r"objective.head='mlp' is not one of \['bert', 'linear'\]"
    ):
        MaskedLMObjective(head="mlp")


# -- whole-word masking ------------------------------------------------------------------------

SYLLABLES = ["ka", "to", "ri", "mu", "sel", "pan", "dor", "vi", "que", "lo"]


def _sentences(n: int, *, punctuation: bool) -> list[str]:
    rng = random.Random(0)
    words = ["".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))) for _ in range(300)]
    marks = [",", ".", "!"] if punctuation else [""]
    return [
        " ".join(
            rng.choice(words) + rng.choice(["", "", *marks]) for _ in range(rng.randint(4, 12))
        )
        for _ in range(n)
    ]


def _wordy_batch(kind: str, vocab_size: int, specials: list[str], *, punctuation: bool):
    """A tokenizer of `kind` with many multi-piece words, a padded batch of its sentences, and
    each token's word as the tokenizer's own pre-tokenizer sees it (-1 on padding)."""
    sentences = _sentences(1500, punctuation=punctuation)
    unk = "[UNK]" if kind == "wordpiece" else "<unk>"
    spec = TokenizerSpec(kind=kind, vocab_size=vocab_size, special_tokens=specials, unk_token=unk)
    tokenizer = train_tokenizer(spec, iter(["\n".join(sentences)]))
    encodings = tokenizer.tokenizer.encode_batch(sentences, add_special_tokens=False)
    width = max(len(e.ids) for e in encodings)
    ids = torch.full((len(sentences), width), tokenizer.token_to_id("[PAD]"))
    words = torch.full((len(sentences), width), -1)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = torch.tensor(encoding.ids)
        words[row, : len(encoding.ids)] = torch.tensor(encoding.word_ids)
    return tokenizer, ids, words


@pytest.mark.parametrize(
    ("kind", "vocab_size", "specials", "punctuation"),
    [
        ("wordpiece", 80, ["[PAD]", "[UNK]", "[MASK]"], True),
        ("bpe", 60, ["[PAD]", "<unk>", "[MASK]"], True),
        ("byte_bpe", 290, ["[PAD]", "<unk>", "[MASK]"], True),
        # Metaspace alone keeps punctuation inside the pre-tokenizer's word; xfmr splits it off.
        ("unigram", 60, ["[PAD]", "<unk>", "[MASK]"], False),
    ],
)
def test_whole_word_masking_takes_every_piece_of_a_word_or_none(
    kind: str, vocab_size: int, specials: list[str], punctuation: bool
) -> None:
    tokenizer, ids, words = _wordy_batch(kind, vocab_size, specials, punctuation=punctuation)
    masker = TokenMasker(whole_word=True)
    masker.bind(tokenizer)
    mask_id = tokenizer.token_to_id("[MASK]")
    joins, open_end = masker.word_tables
    real = words >= 0
    assert torch.equal(number_words(ids, joins=joins, open_end=open_end)[real], words[real]), (
        "the pieces' markers give the pre-tokenizer's words"
    )
    torch.manual_seed(0)
    corrupted, labels = masker(ids)

    selected_words = masked_words = all_words = multi_piece_selected = 0
    for row in range(len(ids)):
        for word in range(int(words[row].max()) + 1):
            at = words[row] == word
            selected = labels[row, at] != IGNORE_INDEX
            masked = corrupted[row, at] == mask_id
            assert selected.all() or not selected.any(), f"{kind}: a word was split"
            assert masked.all() or not masked.any(), f"{kind}: one word, two decisions"
            all_words += 1
            selected_words += int(selected.all())
            masked_words += int(masked.all())
            multi_piece_selected += int(selected.all() and at.sum() > 1)
    assert multi_piece_selected > 100, "the batch must hold selected words of several pieces"
    assert abs(selected_words / all_words - 0.15) < 0.015, "select_rate is per word"
    assert abs(masked_words / selected_words - 0.8) < 0.04
    assert torch.equal(labels[labels != IGNORE_INDEX], ids[labels != IGNORE_INDEX])
    assert (labels[words < 0] == IGNORE_INDEX).all(), "padding is never selected"


def test_whole_word_masking_refuses_a_tokenizer_that_marks_no_words(tmp_path: Path) -> None:
    spec = TokenizerSpec(kind="char", special_tokens=["<unk>", "[MASK]"])
    tokenizer = train_tokenizer(spec, iter(["some text"]))
    with pytest.raises(UserError, match=r"objective.whole_word=true .*\['wordpiece', 'bpe'"):
        TokenMasker(whole_word=True).bind(tokenizer)
    with pytest.raises(UserError, match="objective.whole_word=true .* tokenizer=char marks none"):
        compose_config(tmp_path, ["arch=encoder", "objective=mlm", "objective.whole_word=true"])


# -- next-sentence pairs -----------------------------------------------------------------------


def _documents() -> list[list[list[int]]]:
    """Document d's sentence i is the one token 100 * d + i, so a pair tells where it came from."""
    lengths = [5, 3, 4, 2, 6, 3]
    return [[[100 * d + i] for i in range(n)] for d, n in enumerate(lengths)]


def test_nsp_pairs_are_half_true_next_sentences_and_half_from_other_documents() -> None:
    documents = _documents()
    dataset = SentencePairDataset(documents)
    assert len(dataset) == sum(len(doc) - 1 for doc in documents)
    torch.manual_seed(0)
    labels = []
    for _ in range(400):
        for index in range(len(dataset)):
            (a,), (b,), label = dataset[index]
            labels.append(label)
            if label == IS_NEXT:
                assert b == a + 1, "a true pair is two consecutive sentences of one document"
            else:
                assert label == NOT_NEXT and b // 100 != a // 100, "B from another document"
                assert b % 100 < len(documents[b // 100])
    assert len(labels) == 400 * len(dataset)
    assert abs(labels.count(IS_NEXT) / len(labels) - 0.5) < 0.02


def test_training_pairs_are_redrawn_each_pass_and_seeded_validation_pairs_are_not() -> None:
    dataset = SentencePairDataset(_documents())
    torch.manual_seed(3)
    first = [dataset[i] for i in range(len(dataset))]
    second = [dataset[i] for i in range(len(dataset))]
    torch.manual_seed(3)
    assert [dataset[i] for i in range(len(dataset))] == first, "seeded: the run's seed decides"
    assert first != second, "each epoch draws new pairs"
    fixed = SentencePairDataset(_documents(), seed=0)
    assert [fixed[i] for i in range(len(fixed))] == [fixed[i] for i in range(len(fixed))]


def test_pair_inputs_have_bert_segments_and_truncate_the_longer_sentence_first() -> None:
    cls, sep, pad = 2, 3, 0
    batch = sentence_pair_inputs(
        [([5, 6, 7], [8, 9], IS_NEXT), ([5], [8], NOT_NEXT)],
        cls_id=cls,
        sep_id=sep,
        pad_id=pad,
        max_length=16,
    )
    assert batch["input_ids"].tolist() == [[2, 5, 6, 7, 3, 8, 9, 3], [2, 5, 3, 8, 3, 0, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1] * 8, [1] * 5 + [0] * 3]
    assert batch["labels"].tolist() == [IS_NEXT, NOT_NEXT]
    a, b = list(range(10)), list(range(100, 103))
    assert truncate_pair(a, b, budget=7) == (a[:4], b), "only the longer one is cut"
    assert truncate_pair(list(range(8)), list(range(6)), budget=7) == (list(range(4)), [0, 1, 2])
    assert truncate_pair([1], [2], budget=7) == ([1], [2])
    cut = sentence_pair_inputs([(a, b, IS_NEXT)], cls_id=cls, sep_id=sep, pad_id=pad, max_length=10)
    assert cut["input_ids"].shape == (1, 10)
    assert cut["token_type_ids"].tolist() == [[0] * 6 + [1] * 4]


# -- documents data ----------------------------------------------------------------------------


def _write_documents(path: Path, n_documents: int, sentences: int = 3) -> Path:
    path.write_text(
        "\n\n".join(
            "\n".join(f"document {d} says thing {i}." for i in range(sentences))
            for d in range(n_documents)
        )
        + "\n"
    )
    return path


def test_documents_split_by_document_and_the_tokenizer_sees_training_ones_only(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("one.\ntwo.\n\n\n  \nthree.\n")
    (tmp_path / "b.txt").write_text("four.\nfive.")
    assert read_documents(sorted(tmp_path.glob("*.txt"))) == [
        ["one.", "two."],
        ["three."],
        ["four.", "five."],
    ]
    data = DocumentsDataModule(path=str(_write_documents(tmp_path / "d.txt", 20)), val_fraction=0.1)
    train, val = data.documents()
    assert (len(train), len(val)) == (18, 2)
    assert val[0][0] == "document 18 says thing 0."
    train_text, val_text = data.split_text()
    assert "document 17 " in train_text and "document 18 " not in train_text
    assert val_text.splitlines()[0] == "document 18 says thing 0."


def test_too_few_documents_or_sentences_are_refused(tmp_path: Path) -> None:
    few = DocumentsDataModule(path=str(_write_documents(tmp_path / "few.txt", 3)))
    with pytest.raises(UserError, match="holds 3 documents; next-sentence pairs need two"):
        few.documents()
    single = DocumentsDataModule(path=str(_write_documents(tmp_path / "one.txt", 9, 1)))
    with pytest.raises(UserError, match="no training document has two sentences"):
        single.documents()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["objective=mlm_nsp", "data=text"],
            r"objective=mlm_nsp trains on documents.*\['documents'\]",
        ),
        (["objective=nsp", "DOCS", "model.type_vocab_size=0"], "model.type_vocab_size >= 2, not 0"),
        (["objective=mlm", "DOCS"], r"objective=mlm trains on text.*data in \["),
        (["objective=mlm", "objective.head=mlp"], r"objective.head='mlp' is not one of"),
    ],
)
def test_mismatches_are_refused_by_name(tmp_path: Path, overrides: list[str], message: str) -> None:
    docs = f"data.path={_write_documents(tmp_path / 'd.txt', 4)}"
    overrides = [o for o in overrides if o != "DOCS"] + (
        ["data=documents", docs] if "DOCS" in overrides else []
    )
    with pytest.raises(UserError, match=message):
        compose_config(tmp_path, ["arch=encoder", *overrides])


# -- runs --------------------------------------------------------------------------------------


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    return {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}


def test_mlm_then_mlm_nsp_then_nsp_runs_carry_their_weights(tmp_path: Path) -> None:
    """objective=mlm (BERT's head) -> mlm_nsp on documents -> nsp, two steps each, init_from."""
    from xfmr.training.run import run_training

    docs = _write_documents(tmp_path / "docs.txt", 24, sentences=4)
    encoder = ["arch=encoder", "size=tiny", "tokenizer=wordpiece", "tokenizer.vocab_size=100"]
    documents = ["data=documents", f"data.path={docs}", "objective.max_length=32"]
    runs = {name: tmp_path / name for name in ("mlm", "mlm_nsp", "nsp")}
    for out in runs.values():
        out.mkdir()

    run_training(compose_config(runs["mlm"], [*encoder, "objective=mlm"]))
    mlm_names = set(_weights(runs["mlm"] / "run"))
    assert {n.split(".")[0] for n in mlm_names} == {"backbone", "mlm"}

    results = run_training(
        compose_config(
            runs["mlm_nsp"],
            [*encoder, "objective=mlm_nsp", *documents, f"init_from={runs['mlm'] / 'run'}"],
        )
    )
    assert results["step"] == 2
    assert results["init_from"]["loaded"] == len(mlm_names) and not results["init_from"]["skipped"]
    assert sorted(results["init_from"]["new"]) == [
        "nsp.proj.bias",
        "nsp.proj.weight",
        "pooler.dense.bias",
        "pooler.dense.weight",
    ]
    metrics = results["metrics"]
    # One validation batch of 4 pairs: accuracy is a multiple of 1/4.
    assert 0.0 <= metrics["val/nsp_acc"] <= 1.0
    assert (metrics["val/nsp_acc"] * 4) == pytest.approx(round(metrics["val/nsp_acc"] * 4))
    # Two steps from MLM weights trained on other text: near-uniform over the vocabulary.
    assert 1.0 < metrics["val/mlm_ppl"] < 2 * 100 and math.isfinite(metrics["val/loss"])
    assert metrics["val/loss"] > math.log(metrics["val/mlm_ppl"]), "loss = MLM + NSP"

    pretrained = _weights(runs["mlm_nsp"] / "run")
    results = run_training(
        compose_config(
            runs["nsp"],
            [*encoder, "objective=nsp", *documents, f"init_from={runs['mlm_nsp'] / 'run'}"],
        )
    )
    assert sorted(results["init_from"]["skipped"]) == sorted(
        n for n in pretrained if n.startswith("mlm.")
    )
    assert results["init_from"]["new"] == []
    assert set(results["metrics"]) >= {"val/loss", "val/nsp_acc"}
    assert "val/mlm_ppl" not in results["metrics"]


def test_a_hugging_face_bert_continues_pretraining_with_mlm_and_nsp(tmp_path: Path) -> None:
    """init_from=hf:PATH with objective=mlm_nsp loads every BertForPreTraining tensor."""
    transformers = pytest.importorskip("transformers")
    from xfmr.training.run import run_training

    docs = _write_documents(tmp_path / "docs.txt", 12)
    spec = TokenizerSpec(kind="wordpiece", vocab_size=100)
    tokenizer = train_tokenizer(spec, iter([docs.read_text()]))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    hf = transformers.BertForPreTraining(config).eval()
    hf.save_pretrained(tmp_path / "bert")
    tokenizer.save(tmp_path / "bert" / "tokenizer.json")
    overrides = ["arch=encoder", "objective=mlm_nsp", "data=documents", f"data.path={docs}"]
    overrides += ["objective.max_length=32", f"init_from=hf:{tmp_path / 'bert'}"]
    results = run_training(
        compose_config(tmp_path, [*overrides, "optim.lr=0.0", "schedule=constant"])
    )
    assert results["n_parameters"] == sum(p.numel() for p in hf.parameters())
    weights = _weights(tmp_path / "run")
    hf_weights = hf.state_dict()
    assert torch.equal(weights["nsp.proj.weight"], hf_weights["cls.seq_relationship.weight"])
    assert torch.equal(
        weights["mlm.dense.weight"], hf_weights["cls.predictions.transform.dense.weight"]
    )
    assert "val/nsp_acc" in results["metrics"] and "val/mlm_ppl" in results["metrics"]
