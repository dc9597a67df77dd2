"""Token tagging: entity-level F1 as seqeval scores it, first-piece alignment and truncation,
CoNLL data with its bad rows, and `experiment=bert_conll` trained two steps in process."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from xfmr.data.conll import ConllDataModule
from xfmr.errors import UserError
from xfmr.objectives import IGNORE_INDEX, TaggingObjective
from xfmr.objectives.entity_f1 import (
    NO_PREDICTION,
    EntityCounts,
    EntityF1,
    entities,
    entity_counts,
    entity_scores,
)
from xfmr.objectives.tagging import NO_WORD_START, word_predictions

# --------------------------------------------------------------------------- entity F1

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


def test_entities_follow_seqevals_chunking() -> None:
    # seqeval's get_entities docstring example, and its lenient conlleval rules.
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert entities(["O", "I-PER", "I-PER"]) == [("PER", 1, 2)], "I- without B- starts one"
    assert entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)], "type change"
    assert entities(["B-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert entities(["O", "O", "B-ORG", "I-ORG"]) == [("ORG", 2, 3)], "a trailing entity closes"
    assert entities(["O", "O"]) == []


def test_entity_scores_on_seqevals_documented_example() -> None:
    gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    predicted = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    assert entity_counts(gold, predicted) == EntityCounts(correct=1, predicted=2, gold=2)
    assert entity_scores(gold, predicted) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    # Boundaries must match exactly; no prediction at all scores 0 (seqeval's zero_division).
    assert entity_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])["f1"] == 0.0
    assert entity_scores([["B-PER", "O"]], [["O", "O"]]) == {
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
    }
    # 2 correct of 3 predicted, of 4 gold: P 2/3, R 1/2, F1 = 2PR / (P + R) = 4/7.
    scores = entity_scores(
        [["B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "B-LOC"]],
        [["B-PER", "O", "B-LOC", "B-ORG", "O", "O"]],
    )
    assert scores == pytest.approx({"precision": 2 / 3, "recall": 1 / 2, "f1": 4 / 7})
    with pytest.raises(ValueError, match="same sentences and lengths"):
        entity_counts([["O", "O"]], [["O"]])


def _random_sentences(rng: random.Random, n: int, tags: list[str]) -> list[list[str]]:
    return [[rng.choice(tags) for _ in range(rng.randint(1, 9))] for _ in range(n)]


def test_entity_scores_match_seqeval_on_random_tag_sequences() -> None:
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = random.Random(0)
    tags = [*TAGS, "O", "O", "E-PER", "S-LOC", "B", "I"]  # invalid IOB2 on purpose, IOBES too
    for _ in range(300):
        gold = _random_sentences(rng, rng.randint(1, 6), tags)
        predicted = [[rng.choice(tags) for _ in sentence] for sentence in gold]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seqeval warns when a denominator is 0
            expected = {
                "precision": seqeval.precision_score(gold, predicted),
                "recall": seqeval.recall_score(gold, predicted),
                "f1": seqeval.f1_score(gold, predicted),
            }
        assert entity_scores(gold, predicted) == pytest.approx(expected, abs=1e-12)


def test_metric_counts_equal_the_function_over_batches() -> None:
    rng = random.Random(1)
    gold_all, predicted_all = [], []
    metrics = {score: EntityF1(TAGS, score=score) for score in ("precision", "recall", "f1")}
    for _ in range(4):
        batch_size, width = 5, 8
        target = torch.full((batch_size, width), IGNORE_INDEX)
        preds = torch.randint(0, len(TAGS), (batch_size, width))
        for row in range(batch_size):
            length = rng.randint(1, width)
            target[row, :length] = torch.tensor([rng.randrange(len(TAGS)) for _ in range(length)])
            if rng.random() < 0.5:  # the tail of the sentence was cut: no prediction there
                preds[row, length // 2 : length] = NO_PREDICTION
            words = target[row, :length].tolist()
            gold_all.append([TAGS[t] for t in words])
            predicted_all.append([TAGS[p] if p >= 0 else "O" for p in preds[row, :length].tolist()])
        for metric in metrics.values():
            metric.update(preds, target)
    expected = entity_counts(gold_all, predicted_all)
    metric = metrics["f1"]
    assert (int(metric.correct), int(metric.predicted), int(metric.gold)) == (
        expected.correct,
        expected.predicted,
        expected.gold,
    )
    assert expected.gold > 20 and 0 < expected.correct < expected.predicted
    for score, value in expected.scores().items():
        assert metrics[score].compute().item() == pytest.approx(value, abs=1e-6)
    metric.reset()
    assert int(metric.gold) == 0


# --------------------------------------------------------------------------- alignment


class _Vocabulary:
    ids = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}

    def token_to_id(self, token: str) -> int | None:
        return self.ids.get(token)


def _objective(max_length: int) -> TaggingObjective:
    objective = TaggingObjective(max_length=max_length)
    objective.bind(_Vocabulary())
    objective.bind_labels(["B-PER", "I-PER", "O"])
    return objective


def test_label_sits_on_each_words_first_piece() -> None:
    objective = _objective(max_length=16)
    ids, labels, starts = objective.encode([[10], [11, 12, 13], [], [14, 15]], [0, 1, 2, 2])
    assert ids == [2, 10, 11, 12, 13, 1, 14, 15, 3], "[CLS] pieces [SEP]; no pieces -> [UNK]"
    assert labels == [IGNORE_INDEX, 0, 1, IGNORE_INDEX, IGNORE_INDEX, 2, 2, IGNORE_INDEX, -100]
    assert starts == [1, 2, 5, 6]


def test_truncation_keeps_sep_and_cut_words_score_as_missed() -> None:
    objective = _objective(max_length=5)  # [CLS] + 3 pieces + [SEP]
    ids, labels, starts = objective.encode([[10], [11, 12, 13], [14]], [0, 2, 0])
    assert ids == [2, 10, 11, 12, 3], "the second word is cut after two pieces"
    assert labels == [IGNORE_INDEX, 0, 2, IGNORE_INDEX, IGNORE_INDEX]
    assert starts == [1, 2, NO_WORD_START], "the third word lost its first piece"

    batch = objective.collate([([[10], [11, 12, 13], [14]], [0, 2, 0]), ([[20]], [2])])
    assert batch["input_ids"].tolist() == [[2, 10, 11, 12, 3], [2, 20, 3, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["word_starts"].tolist() == [
        [1, 2, NO_WORD_START],
        [1, NO_WORD_START, NO_WORD_START],
    ]
    assert batch["word_labels"].tolist() == [[0, 2, 0], [2, IGNORE_INDEX, IGNORE_INDEX]]

    # A model that gets every kept word right: the cut B-PER still counts against recall.
    logits = torch.full((2, 5, 3), -1.0)
    logits[0, 1, 0] = logits[0, 2, 2] = logits[1, 1, 2] = 1.0  # B-PER, O; O
    predicted = word_predictions(logits.argmax(-1), batch["word_starts"])
    assert predicted[0].tolist() == [0, 2, NO_PREDICTION]
    metrics = objective.metrics()
    objective.update_metrics(metrics, logits, batch)
    values = {name: metric.compute().item() for name, metric in metrics.items()}
    assert values == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3)}


def test_max_length_too_short_is_refused() -> None:
    with pytest.raises(UserError, match="objective.max_length=2"):
        TaggingObjective(max_length=2)


# --------------------------------------------------------------------------- data=conll

TRAIN = """-DOCSTART- -X- -X- O

EU NNP B-ORG
rejects VBZ O
German JJ B-MISC
call NN O

Peter NNP B-PER
Blackburn NNP I-PER

BRUSSELS NNP B-LOC
1996-08-22 CD O
"""
DEV = """Japan NNP B-LOC
wins VBZ O

LONDON NNP B-LOC
1996-08-30 CD O
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_conll_data_takes_its_tags_from_training(tmp_path: Path) -> None:
    train, dev = _write(tmp_path / "train.txt", TRAIN), _write(tmp_path / "dev.txt", DEV)
    data = ConllDataModule(train_path=str(train), val_path=str(dev))
    assert data.label_names() == ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER", "O"]
    train_text, _ = data.split_text()
    assert train_text == "EU rejects German call\nPeter Blackburn\nBRUSSELS 1996-08-22"
    assert "Japan" not in train_text, "the tokenizer trains on the training sentences only"


def test_conll_data_tokenizes_each_word_on_its_own(tmp_path: Path) -> None:
    from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

    train, dev = _write(tmp_path / "train.txt", TRAIN), _write(tmp_path / "dev.txt", DEV)
    data = ConllDataModule(train_path=str(train), val_path=str(dev), batch_size=2)
    spec = TokenizerSpec(kind="wordpiece", vocab_size=60, lowercase=False)
    tokenizer = train_tokenizer(spec, iter([data.split_text()[0]]))
    objective = TaggingObjective()
    objective.bind(tokenizer)
    objective.bind_labels(data.label_names())
    data.attach(tokenizer, objective.collate)
    pieces, labels = data.val_set[1]
    assert pieces == [tokenizer.encode("LONDON"), tokenizer.encode("1996-08-30")]
    assert len(pieces[1]) > 1, "the date splits into several pieces"
    assert labels == [0, 5]  # B-LOC, O
    batch = next(iter(data.val_dataloader()))
    assert batch["word_labels"].tolist() == [[0, 5], [0, 5]]
    first = batch["word_starts"][1, 1].item()
    assert batch["labels"][1, first] == 5 and batch["labels"][1, first + 1] == IGNORE_INDEX


def test_conll_bad_rows_are_skipped_or_stop_the_run(tmp_path: Path) -> None:
    train = _write(tmp_path / "train.txt", TRAIN)
    dev = _write(
        tmp_path / "dev.txt",
        "Japan NNP B-LOC\n"  # 1
        "wins VBZ I-PER\n"  # 2: not IOB2 (I-PER after B-LOC)
        "\n"
        "LONDON NNP B-LOC\n"  # 4
        "\n"
        "Monday NNP B-DATE\n"  # 6: a tag training never had
        "\n"
        "Paris NNP B-LOC\n",  # 8
    )
    with pytest.raises(UserError, match=rf"{dev}:2: tag 'I-PER' follows 'B-LOC'"):
        ConllDataModule(train_path=str(train), val_path=str(dev)).examples()
    fixed = _write(tmp_path / "fixed.txt", DEV + "\nMonday NNP B-DATE\n")
    with pytest.raises(UserError, match=rf"{fixed}:7: unknown tag 'B-DATE'.*'B-LOC'"):
        ConllDataModule(train_path=str(train), val_path=str(fixed)).examples()

    data = ConllDataModule(train_path=str(train), val_path=str(dev), on_bad_row="skip")
    _, val = data.examples()
    assert [s.tokens for s in val] == [["LONDON"], ["Paris"]]

    ragged = _write(tmp_path / "ragged.txt", "EU NNP B-ORG\nrejects O\n\nPeter NNP B-PER\n")
    data = ConllDataModule(train_path=str(train), val_path=str(ragged), on_bad_row="skip")
    assert [s.tokens for s in data.examples()[1]] == [["Peter"]]
    with pytest.raises(UserError, match="ragged.txt:2: 2 columns, expected 3"):
        ConllDataModule(train_path=str(train), val_path=str(ragged)).examples()


def test_bad_rows_skipped_before_an_unknown_tag_keep_its_line_number(tmp_path: Path) -> None:
    from xfmr.data.conll import _known_tags_only
    from xfmr.data.formats.conll import read_conll

    dev = _write(tmp_path / "dev.txt", "a B-LOC\nb I-PER\n\nc O\nd B-DATE\n")
    sentences, bad = read_conll(dev, on_bad_row="skip")
    assert len(bad) == 1 and [s.tokens for s in sentences] == [["c", "d"]]
    with pytest.raises(UserError, match=rf"{dev}:5: unknown tag 'B-DATE'"):
        _known_tags_only(str(dev), sentences, bad, ["B-LOC", "O"], "error")


# --------------------------------------------------------------------------- config and run


def test_tagging_refuses_text_data_and_decoders_by_name(tmp_path: Path) -> None:

    train, dev = _write(tmp_path / "train.txt", TRAIN), _write(tmp_path / "dev.txt", DEV)
    conll = ["data=conll", f"data.train_path={train}", f"data.val_path={dev}"]
    with pytest.raises(UserError, match=r"objective=tagging trains on tagged.*\['conll'\]"):
        compose_config(tmp_path, ["objective=tagging", "arch=encoder"])
    with pytest.raises(UserError, match=r"objective=tagging cannot train arch=decoder"):
        compose_config(tmp_path, ["objective=tagging", "arch=decoder", *conll])
    too_long = ["objective.max_length=256", "pos=learned", "model.pos.max_positions=128"]
    with pytest.raises(UserError, match="objective.max_length=256 .* model.pos.max_positions=128"):
        compose_config(tmp_path, ["objective=tagging", "arch=encoder", *conll, *too_long])
    compose_config(tmp_path, ["objective=tagging", "arch=encoder", *conll])


def _conll_run(tmp_path: Path, extra: list[str]) -> tuple[dict, object]:
    from xfmr.training.run import run_training

    _write(tmp_path / "data" / "conll2003" / "train.txt", TRAIN * 3)
    _write(tmp_path / "data" / "conll2003" / "dev.txt", DEV)
    overrides = [
        "experiment=bert_conll",
        "data=conll",
        "size=tiny",
        "tokenizer.vocab_size=120",
        "trainer.limit_val_batches=1.0",
        *extra,
    ]
    cfg = compose_config(tmp_path, overrides)
    return run_training(cfg), cfg


def _recomputed_scores(cfg, run_dir: Path) -> dict[str, float]:
    """val/precision, val/recall, val/f1 computed again from the saved model, by the pure function."""
    from xfmr.nn.config import ModelConfig
    from xfmr.text.tokenizers import TextTokenizer

    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    data = ConllDataModule(train_path=cfg.data.train_path, val_path=cfg.data.val_path)
    objective = TaggingObjective(max_length=cfg.objective.max_length)
    tokenizer = TextTokenizer.load(run_dir / "tokenizer.json")
    objective.bind(tokenizer)
    objective.bind_labels(data.label_names())
    data.attach(tokenizer, objective.collate)
    model = objective.build_model(
        ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"])
    )
    model.load_state_dict(
        {
            k.removeprefix("model."): v
            for k, v in checkpoint["state_dict"].items()
            if k.startswith("model.")
        }
    )
    batch = objective.collate(data.val_set)
    with torch.no_grad():
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    predicted = word_predictions(logits.argmax(-1), batch["word_starts"])
    names = data.label_names()
    gold = [[names[i] for i in s.tolist() if i != IGNORE_INDEX] for s in batch["word_labels"]]
    guesses = [
        [names[p] if p != NO_PREDICTION else "O" for p in row[: len(g)].tolist()]
        for row, g in zip(predicted, gold, strict=True)
    ]
    return entity_scores(gold, guesses)


@pytest.mark.parametrize("packing", [False, True])
def test_bert_conll_trains_two_steps_and_reports_entity_f1(tmp_path: Path, packing: bool) -> None:
    # Packed (data.packing), the logged scores still equal those recomputed sentence by sentence.
    results, cfg = _conll_run(tmp_path, [f"data.packing={str(packing).lower()}"])
    metrics = results["metrics"]
    assert results["step"] == 2
    assert {"val/loss", "val/precision", "val/recall", "val/f1"} <= metrics.keys()
    expected = _recomputed_scores(cfg, tmp_path / "run")
    for name, value in expected.items():
        assert metrics[f"val/{name}"] == pytest.approx(value, abs=1e-6), name
    assert cfg.tokenizer.lowercase is False and cfg.model.arch == "encoder"


def test_mlm_run_carries_its_encoder_into_tagging(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    encoder = ["arch=encoder", "size=tiny", "model.pos.max_positions=128", "tokenizer=wordpiece"]
    pre = tmp_path / "mlm"
    pre.mkdir()
    cased = ["tokenizer.vocab_size=120", "tokenizer.lowercase=false"]
    run_training(compose_config(pre, [*encoder, *cased, "objective=mlm"]))
    results, _ = _conll_run(
        tmp_path / "ner", [f"init_from={pre / 'run'}", "optim.lr=0.0", "schedule=constant"]
    )
    report = results["init_from"]
    assert sorted(report["new"]) == ["classifier.bias", "classifier.weight"]
    assert report["loaded"] > 0 and all(not k.startswith("backbone.") for k in report["skipped"])
