"""data.packing for tagging, span corruption and QA: each example of a packed batch gets the
logits, the loss, the count and the scores it gets unpacked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from xfmr.kinds import QAItem, QAWindow
from xfmr.nn.config import ModelConfig
from xfmr.objectives.common import IGNORE_INDEX
from xfmr.objectives.entity_f1 import NO_PREDICTION
from xfmr.objectives.packing import padding_share
from xfmr.objectives.qa import QuestionAnsweringObjective
from xfmr.objectives.span_corruption import SpanCorruptionObjective, document_pieces
from xfmr.objectives.tagging import TaggingObjective, word_predictions

LENGTHS = (9, 2, 5, 3, 7, 1, 4)
TAGS = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]


def _ids(n: int, seed: int) -> list[int]:
    return torch.randint(5, 30, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _config(arch: str, pos: str, **keys) -> ModelConfig:
    keys = {"vocab_size": 30, "n_layers": 2, "n_heads": 4, "d_model": 32, **keys}
    return ModelConfig(arch=arch, pos={"name": pos}, **keys)


def _forward(objective, model: nn.Module, batch: dict) -> tuple[dict, torch.Tensor]:
    with torch.no_grad():
        return objective.forward(model, batch)


def _same_losses(objective, loss: dict, packed_loss: dict, batch: dict, packed: dict) -> None:
    for term in loss:
        assert torch.allclose(packed_loss[term], loss[term], rtol=1e-6, atol=1e-5), term
    counts = [objective.counts(b) for b in (batch, packed)]
    assert {k: int(v) for k, v in counts[0].items()} == {k: int(v) for k, v in counts[1].items()}


def _scores(objective, logits: torch.Tensor, batch: dict) -> dict[str, float]:
    metrics = nn.ModuleDict(objective.metrics())
    objective.update_metrics(metrics, logits, batch)
    return {name: float(metric.compute()) for name, metric in metrics.items()}


def _sentence(n: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """n words of 1-3 pieces each, with random tags."""
    generator = torch.Generator().manual_seed(seed)
    pieces = [_ids(int(torch.randint(1, 4, (1,), generator=generator)), seed * 31 + w)
              for w in range(n)]  # fmt: skip
    return pieces, torch.randint(0, len(TAGS), (n,), generator=generator).tolist()


@pytest.mark.parametrize("pos", ["learned", "relative", "rotary", "sinusoidal"])
def test_packed_tagging_equals_unpacked(pos):
    objective = TaggingObjective(max_length=16)
    objective.pad_id, objective.unk_id, objective.cls_id, objective.sep_id = 0, 1, 2, 3
    objective.bind_labels(TAGS)
    torch.manual_seed(0)
    model = objective.build_model(_config("encoder", pos)).eval()
    batch = objective.collate([_sentence(n, i) for i, n in enumerate(LENGTHS)])
    packed = objective.pack(batch)
    assert packed["input_ids"].size(0) < batch["input_ids"].size(0)
    assert padding_share(packed["attention_mask"]) < padding_share(batch["attention_mask"])
    (loss, logits), (packed_loss, packed_logits) = (
        _forward(objective, model, b) for b in (batch, packed)
    )
    for i in range(len(LENGTHS)):  # each sentence's logits, wherever its row put them
        alone = logits[i, : int(batch["attention_mask"][i].sum())]
        assert (packed_logits[packed["document_ids"] == i] - alone).abs().max() < 1e-5, i
    _same_losses(objective, loss, packed_loss, batch, packed)
    kept_words = int((batch["word_starts"] >= 0).sum())  # a word truncation kept: its tag
    assert int((packed["labels"] != IGNORE_INDEX).sum()) == kept_words
    # Gold tags: the unpacked model's own (O where truncation cut a word), so that unpacked
    # every entity is found (F1 = 1) and packed only if every word's prediction is the same.
    gold = word_predictions(logits.argmax(-1), batch["word_starts"])
    gold = gold.masked_fill(gold == NO_PREDICTION, TAGS.index("O"))
    gold = gold.masked_fill(batch["word_labels"] == IGNORE_INDEX, IGNORE_INDEX)
    batch["word_labels"] = packed["word_labels"] = gold
    assert _scores(objective, logits, batch)["f1"] == 1.0
    assert _scores(objective, packed_logits, packed) == _scores(objective, logits, batch)


def _question(n_context: int, seed: int, windows: int) -> QAItem:
    """A question read through `windows` windows of a context of n_context words; the first
    window holds the answer (words 1-2 of it), the others do not."""
    words = [f"w{seed}x{k}" for k in range(n_context)]
    offsets, at = [], 0
    for word in words:
        offsets.append((at, at + len(word)))
        at += len(word) + 1
    window = []
    for w in range(windows):
        cut = slice(w, n_context)
        window.append(
            QAWindow(
                question_ids=_ids(1 + seed % 3, 100 + seed),
                context_ids=_ids(n_context, seed)[cut],
                context_offsets=offsets[cut],
                answer=(1, min(2, n_context - 1)) if w == 0 else None,
            )
        )
    return QAItem(id=str(seed), context=" ".join(words), answers=[words[1]], windows=window)


@pytest.mark.parametrize("pos", ["learned", "relative", "rotary", "alibi"])
def test_packed_qa_equals_unpacked(pos):
    objective = QuestionAnsweringObjective(max_answer_length=4)
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    torch.manual_seed(0)
    model = objective.build_model(_config("encoder", pos, type_vocab_size=2)).eval()
    items = [_question(max(n, 2), i, windows=1 + i % 2) for i, n in enumerate(LENGTHS)]
    batch = objective.collate(items)
    packed = objective.pack(batch)
    windows = batch["input_ids"].size(0)
    assert packed["input_ids"].size(0) < windows
    (loss, logits), (packed_loss, packed_logits) = (
        _forward(objective, model, b) for b in (batch, packed)
    )
    for i in range(windows):  # each window's logits, and its targets, wherever its row put it
        mine, n = packed["document_ids"] == i, int(batch["attention_mask"][i].sum())
        assert (packed_logits[mine] - logits[i, :n]).abs().max() < 1e-5, i
        row = int(mine.any(1).nonzero())
        first = int(mine[row].nonzero()[0])
        assert packed["labels"][i].tolist() == [first + t for t in batch["labels"][i].tolist()]
    _same_losses(objective, loss, packed_loss, batch, packed)
    # Gold answers: the unpacked model's own, so that unpacked EM = 100 and packed too only if
    # every question's best span over its windows is the same.
    batch["spans"].answers[:] = [[a] for a in objective.predict(logits, batch["spans"])]
    assert _scores(objective, logits, batch)["em"] == 100.0
    assert _scores(objective, packed_logits, packed) == _scores(objective, logits, batch)


def _block(cuts: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A packed text block of 25 ids (T + 1) whose documents change after each of `cuts`."""
    documents = torch.zeros(25, dtype=torch.long)
    for cut in cuts:
        documents[cut:] += 1
    return torch.tensor(_ids(25, seed)), documents + seed  # numbered from any first


@pytest.mark.parametrize("pos", ["relative", "sinusoidal", "rotary", "learned"])
def test_packed_span_corruption_equals_unpacked(pos):
    objective = SpanCorruptionObjective(n_sentinels=8)
    objective.pad_id, objective.eos_id, objective.sentinel_ids = 0, 1, list(range(30, 38))
    torch.manual_seed(0)
    config = _config("encoder_decoder", pos, vocab_size=40)
    model = objective.build_model(config).eval()
    blocks = [_block([1, 9], 0), _block([], 1), _block([12, 13, 20], 2)]
    torch.manual_seed(1)
    packed = objective.pack(objective.collate(blocks))
    rows = [document_pieces(ids[:-1].tolist(), of[:-1].tolist()) for ids, of in blocks]
    assert [[len(p) for p in row] for row in rows] == [[1, 8, 15], [24], [12, 1, 7, 4]]
    torch.manual_seed(1)  # the same spans, drawn in the same order, each piece a row alone
    batch = objective.corrupted([[piece] for row in rows for piece in row])
    (loss, logits), (packed_loss, packed_logits) = (
        _forward(objective, model, b) for b in (batch, packed)
    )
    _same_losses(objective, loss, packed_loss, batch, packed)
    places = [(r, number) for r, row in enumerate(rows) for number in range(len(row))]
    for example, (r, number) in enumerate(places):  # each target where its block's row put it
        mine = packed["decoder_document_ids"][r] == number
        n = int(batch["decoder_attention_mask"][example].sum())
        assert int(mine.sum()) == n
        assert torch.equal(packed["labels"][r][mine], batch["labels"][example, :n])
        assert (packed_logits[r][mine] - logits[example, :n]).abs().max() < 1e-5, example


def test_every_shipped_objective_packs_and_says_so_in_the_config(tmp_path):
    """objective=nsp, the last to pack, composes with data.packing=true; an objective of a
    person's own that does not pack is refused by `DataConfig.check_packing`
    (tests/objectives/test_packing.py)."""
    from helpers.config import compose_config

    (tmp_path / "d.txt").write_text("a b.\nc d.\n\ne f.\n")
    overrides = ["objective=nsp", "arch=encoder", "data=documents"]
    overrides += [f"data.path={tmp_path / 'd.txt'}", "data.packing=true"]
    assert compose_config(tmp_path, overrides).data.get("packing") is True


def _squad_file(path: Path) -> Path:
    """SQuAD v1.1 JSON: a long context read in several windows, short ones that share rows."""
    contexts = {
        "The Eiffel Tower was built in 1889 by Gustave Eiffel's company in Paris, France.": [
            ("When was the tower built?", "1889"),
            ("Where is the tower?", "Paris"),
            ("Whose company built it?", "Gustave Eiffel"),
        ],
        "Water boils at 100 degrees at sea level.": [("When does water boil?", "100 degrees")],
        "Cats sleep a lot.": [("Who sleeps?", "Cats"), ("How much?", "a lot")],
        "Owls hunt at night.": [("When?", "at night")],
    }
    paragraphs = [
        {"context": context, "qas": [
            {"id": f"q{i}-{j}", "question": question,
             "answers": [{"text": answer, "answer_start": context.find(answer)}]}
            for j, (question, answer) in enumerate(questions)]}
        for i, (context, questions) in enumerate(contexts.items())
    ]  # fmt: skip
    document = {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}
    path.write_text(json.dumps(document))
    return path


def test_a_packed_squad_run_logs_what_the_unpacked_run_logs(tmp_path):
    """Through the loaders, the training step and validation: the same losses (each divided by
    the same count of windows) and the same EM and F1, packed or not."""
    from helpers.config import compose_config
    from xfmr.data.squad import SquadDataModule
    from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer
    from xfmr.training.run import run_training

    path, windows = _squad_file(tmp_path / "tiny.json"), {"max_length": 32, "doc_stride": 8}
    data = SquadDataModule(train_path=str(path), val_path=str(path), max_query_length=8, **windows)
    # One tokenizer for both runs (training one breaks its ties differently in each run).
    tokenizer = train_tokenizer(TokenizerSpec(kind="wordpiece", vocab_size=120),
                                iter(data.split_text()))  # fmt: skip
    tokenizer.save(tmp_path / "tokenizer.json")
    objective = QuestionAnsweringObjective()
    objective.bind(tokenizer)
    data.attach(tokenizer, objective.collate)
    batch = objective.collate(data.val_set)
    assert objective.pack(batch)["input_ids"].size(0) < batch["input_ids"].size(0)  # it packs
    overrides = ["experiment=bert_squad", "data=squad", f"data.train_path={path}", "size=tiny"]
    overrides += [f"data.val_path={path}", "data.max_query_length=8"]
    overrides += [f"data.{key}={value}" for key, value in windows.items()]
    overrides += ["tokenizer=pretrained", f"tokenizer.path={tmp_path / 'tokenizer.json'}"]
    overrides += ["tokenizer.vocab_size=null", "trainer.limit_val_batches=1.0"]
    overrides += ["model.dropout=0.0", "model.attn_dropout=0.0"]  # no draws that packing moves
    runs = {}
    for packing in ("false", "true"):
        (tmp_path / packing).mkdir()
        config = compose_config(tmp_path / packing, [*overrides, f"data.packing={packing}"])
        runs[packing] = run_training(config)["metrics"]
    unpacked, packed = runs["false"], runs["true"]
    assert packed["train/loss"] == pytest.approx(unpacked["train/loss"], rel=1e-4)
    assert packed["val/loss"] == pytest.approx(unpacked["val/loss"], rel=1e-4)
    assert (packed["val/em"], packed["val/f1"]) == (unpacked["val/em"], unpacked["val/f1"])
