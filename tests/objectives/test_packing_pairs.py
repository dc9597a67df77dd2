"""data.packing for mlm_nsp and nsp: sentence pairs share rows, and each pair gets the masks,
the MLM and NSP logits, the losses, the counts and the scores it gets unpacked."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import IGNORE_INDEX
from xfmr.objectives.nsp import MaskedLMNextSentenceObjective, NextSentenceObjective
from xfmr.objectives.packing import PackedCollate, padding_share

LENGTHS = (9, 2, 5, 3, 7, 1, 4)
SPECIALS = 4  # ids 0-3: [PAD], [CLS], [SEP], [MASK]


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(SPECIALS, 30, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _objective() -> MaskedLMNextSentenceObjective:
    """mlm_nsp with ids bound by hand; a high select rate, so that every pair masks some."""
    objective = MaskedLMNextSentenceObjective(max_length=16, select_rate=0.3)
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    masker = objective.masker
    masker.mask_id, masker.vocab_size, masker.special_ids = 3, 30, torch.arange(SPECIALS)
    return objective


def _pairs() -> list[tuple[list[int], list[int], int]]:
    """(A, B, label) pairs of different lengths (one cut to max_length), labels 0 and 1."""
    return [(_ids(n, i), _ids(LENGTHS[-1 - i], 50 + i), i % 2) for i, n in enumerate(LENGTHS)]


def _both(pos: str):
    """(objective, unpacked batch, packed batch, unpacked (loss, logits), packed ones): the
    packed batch made as the loaders make it (collate, then pack) from the same draws."""
    objective = _objective()
    torch.manual_seed(0)
    config = ModelConfig(arch="encoder", pos={"name": pos}, vocab_size=30, n_layers=2,
                         n_heads=4, d_model=32, type_vocab_size=2)  # fmt: skip
    model = objective.build_model(config).eval()
    torch.manual_seed(1)
    batch = objective.collate(_pairs())
    torch.manual_seed(1)
    packed = PackedCollate(objective)(_pairs())
    with torch.no_grad():
        outputs = [objective.forward(model, b) for b in (batch, packed)]
    return objective, batch, packed, *outputs


@pytest.mark.parametrize("pos", ["learned", "rotary", "alibi"])
def test_packed_pairs_for_nsp_alone_equal_unpacked(pos):
    """objective=nsp (EncoderNextSentence, no MLM head): each pair's logits from its own [CLS],
    its loss and the count the step divides by, as unpacked; its accuracy too."""
    objective = NextSentenceObjective(max_length=16)
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    torch.manual_seed(0)
    config = ModelConfig(arch="encoder", pos={"name": pos}, vocab_size=30, n_layers=2,
                         n_heads=4, d_model=32, type_vocab_size=2)  # fmt: skip
    model = objective.build_model(config).eval()
    batch, packed = objective.collate(_pairs()), PackedCollate(objective)(_pairs())
    assert packed["input_ids"].size(0) < batch["input_ids"].size(0)
    with torch.no_grad():
        (loss, logits), (packed_loss, packed_logits) = (
            objective.forward(model, b) for b in (batch, packed)
        )
    assert packed_logits.shape == logits.shape == (len(LENGTHS), 2)
    assert (packed_logits - logits).abs().max() < 1e-5
    assert torch.allclose(packed_loss["pairs"], loss["pairs"], rtol=1e-6, atol=1e-5)
    counts = [{k: int(v) for k, v in objective.counts(b).items()} for b in (batch, packed)]
    assert counts[0] == counts[1] == {"pairs": len(LENGTHS)}
    assert _scores(objective, packed_logits, packed) == _scores(objective, logits, batch)


def _scores(objective, logits, batch: dict) -> dict[str, float]:
    metrics = nn.ModuleDict(objective.metrics())
    objective.update_metrics(metrics, logits, batch)
    return {name: float(metric.compute()) for name, metric in metrics.items()}


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rotary", "alibi"])
def test_packed_sentence_pairs_equal_unpacked(pos):
    objective, batch, packed, (loss, logits), (packed_loss, packed_logits) = _both(pos)
    assert packed["input_ids"].size(0) < batch["input_ids"].size(0)
    assert padding_share(packed["attention_mask"]) < padding_share(batch["attention_mask"])
    (mlm, nsp), (packed_mlm, packed_nsp) = logits, packed_logits
    for i in range(len(LENGTHS)):  # each pair where its row put it: its masks, its segments
        mine, n = packed["document_ids"] == i, int(batch["attention_mask"][i].sum())
        assert int(mine.sum()) == n and int(mine.any(1).sum()) == 1
        for key in ("input_ids", "token_type_ids", "labels"):
            assert torch.equal(packed[key][mine], batch[key][i, :n]), (key, i)
        assert packed["input_ids"][mine][0] == objective.cls_id
        assert (packed_mlm[mine] - mlm[i, :n]).abs().max() < 1e-5, i
    assert packed_nsp.shape == nsp.shape == (len(LENGTHS), 2)
    assert (packed_nsp - nsp).abs().max() < 1e-5  # each pair from its own [CLS]
    assert packed_loss.keys() == loss.keys() == {"mlm", "nsp"}
    for term in loss:
        assert torch.allclose(packed_loss[term], loss[term], rtol=1e-6, atol=1e-5), term
    counts = [{k: int(v) for k, v in objective.counts(b).items()} for b in (batch, packed)]
    assert counts[0] == counts[1]  # what the step divides each term by
    assert counts[0]["nsp"] == len(LENGTHS)
    assert counts[0]["mlm"] == int((batch["labels"] != IGNORE_INDEX).sum()) >= len(LENGTHS)


def test_packed_sentence_pairs_score_nsp_accuracy_and_mlm_perplexity_as_unpacked():
    objective, batch, packed, (_, logits), (_, packed_logits) = _both("learned")
    # Gold labels: the unpacked model's own guesses, three of them turned, so that unpacked
    # accuracy is 4/7 and packed is too only if each pair's guess is the same.
    gold = logits[1].argmax(-1)
    gold[:3] = 1 - gold[:3]
    batch["next_sentence_label"] = packed["next_sentence_label"] = gold
    unpacked_scores, packed_scores = (
        _scores(objective, logits, batch),
        _scores(objective, packed_logits, packed),
    )
    assert unpacked_scores["nsp_acc"] == pytest.approx(4 / 7)
    assert packed_scores["nsp_acc"] == unpacked_scores["nsp_acc"]
    assert packed_scores["mlm_ppl"] == pytest.approx(unpacked_scores["mlm_ppl"], rel=1e-5)


def _write_documents(path: Path) -> Path:
    """24 documents of 4 sentences, one in four of 10 words and the others of 1 to 3, so that
    short pairs share rows."""
    words = [10 if (d + i) % 4 == 0 else 1 + (d + i) % 3 for d in range(24) for i in range(4)]
    documents = (
        "\n".join(
            " ".join(f"word{(d * 7 + i * 5 + w) % 23}" for w in range(words[4 * d + i])) + "."
            for i in range(4)
        )
        for d in range(24)
    )
    path.write_text("\n\n".join(documents) + "\n")
    return path


def test_a_packed_mlm_nsp_run_logs_what_the_unpacked_run_logs(tmp_path):
    """Through the loaders, the training step and validation: the same draws (pairs and masks),
    so the same losses over the same counts, and the same NSP accuracy and MLM perplexity."""
    from helpers.config import compose_config
    from xfmr.data.documents import DocumentsDataModule
    from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer
    from xfmr.training.run import run_training

    path = _write_documents(tmp_path / "docs.txt")
    data = DocumentsDataModule(path=str(path), val_fraction=0.25)
    # One tokenizer for both runs (training one breaks its ties differently in each run).
    tokenizer = train_tokenizer(TokenizerSpec(kind="wordpiece", vocab_size=80),
                                iter(data.split_text()[:1]))  # fmt: skip
    tokenizer.save(tmp_path / "tokenizer.json")
    objective = MaskedLMNextSentenceObjective(max_length=32)
    objective.bind(tokenizer)
    data.attach(tokenizer, objective.collate)
    batch = objective.collate([data.val_set[i] for i in range(8)])
    assert objective.pack(batch)["input_ids"].size(0) < 8  # it packs
    overrides = ["arch=encoder", "size=tiny", "objective=mlm_nsp", "objective.max_length=32"]
    overrides += ["data=documents", f"data.path={path}", "data.val_fraction=0.25"]
    overrides += ["data.batch_size=8", "data.cache=false", "trainer.limit_val_batches=1.0"]
    overrides += ["tokenizer=pretrained", f"tokenizer.path={tmp_path / 'tokenizer.json'}"]
    overrides += ["tokenizer.vocab_size=null", "model.type_vocab_size=2"]
    overrides += ["model.dropout=0.0", "model.attn_dropout=0.0"]  # no draws that packing moves
    runs = {}
    for packing in ("false", "true"):
        (tmp_path / packing).mkdir()
        config = compose_config(tmp_path / packing, [*overrides, f"data.packing={packing}"])
        runs[packing] = run_training(config)
    assert runs["true"]["step"] == 2
    unpacked, packed = runs["false"]["metrics"], runs["true"]["metrics"]
    for key in ("train/loss", "val/loss", "val/mlm_ppl"):
        assert packed[key] == pytest.approx(unpacked[key], rel=1e-4), key
    assert packed["val/nsp_acc"] == unpacked["val/nsp_acc"]
