"""Extractive QA: SQuAD's EM/F1, answers from characters to tokens, span decoding, data=squad,
objective=qa end to end, and a tiny model that learns to find a fixed-pattern answer."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from xfmr.data.squad import QAItem, SquadDataModule, answer_tokens, split_windows
from xfmr.errors import UserError
from xfmr.objectives.qa import QuestionAnsweringObjective, SpanSources, best_spans
from xfmr.objectives.squad_metrics import (
    SquadScore,
    exact_match,
    f1,
    normalize_answer,
    squad_scores,
)
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

CONTEXT = "The Eiffel Tower was built in 1889 by Gustave Eiffel's company in Paris, France."


def _squad(path: Path, paragraphs: list[tuple[str, list[tuple[str, str, list[str]]]]]) -> Path:
    """SQuAD v1.1 JSON: per paragraph a context and (id, question, answer texts) whose
    answer_start is the first occurrence of each answer in the context."""
    data = [
        {
            "context": context,
            "qas": [
                {
                    "id": qid,
                    "question": question,
                    "answers": [{"text": a, "answer_start": context.find(a)} for a in answers],
                }
                for qid, question, answers in questions
            ],
        }
        for context, questions in paragraphs
    ]
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": data}]}))
    return path


def _tiny_squad(path: Path) -> Path:
    """Three good questions and a malformed one (its answer is not at answer_start)."""
    _squad(
        path,
        [
            (
                CONTEXT,
                [
                    ("q-when", "When was the tower built?", ["1889"]),
                    ("q-where", "Where is the tower?", ["Paris, France", "Paris"]),
                ],
            ),
            ("Water boils at 100 degrees at sea level.", [("q-boil", "When?", ["100 degrees"])]),
        ],
    )
    document = json.loads(path.read_text())
    document["data"][0]["paragraphs"][1]["qas"].append(
        {"id": "q-bad", "question": "Why?", "answers": [{"text": "sea", "answer_start": 0}]}
    )
    path.write_text(json.dumps(document))
    return path


def _wordpiece(text: str, vocab_size: int = 90):
    return train_tokenizer(TokenizerSpec(kind="wordpiece", vocab_size=vocab_size), iter([text]))


# --------------------------------------------------------------------------- EM / F1


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces() -> None:
    assert normalize_answer("  The Eiffel-Tower!  ") == "eiffeltower"  # "-" vanishes, no space
    assert normalize_answer("An apple and a banana, then THE end.") == "apple and banana then end"
    assert normalize_answer("Anne's theatre") == "annes theatre"  # whole words only


def test_exact_match_and_f1_worked_examples() -> None:
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel Tower in Paris", "Eiffel Tower") == 0.0
    # prediction {in, paris, france} vs gold {paris}: P 1/3, R 1 -> 2 * (1/3) / (4/3)
    assert f1("in Paris, France", "Paris") == pytest.approx(0.5)
    # words count with multiplicity: P 1/2, R 1
    assert f1("Paris Paris", "the Paris") == pytest.approx(2 / 3)
    assert f1("London", "Paris") == 0.0  # no overlap
    # articles alone normalise to nothing: equal strings, but F1 has no shared word
    assert exact_match("a", "the") == 1.0 and f1("a", "the") == 0.0


def test_scores_take_the_best_gold_answer() -> None:
    # vs "city of paris": P 1, R 1/3 -> 0.5; vs "paris france": P 1, R 1/2 -> 2/3
    assert squad_scores("Paris", ["the city of Paris", "Paris, France"]) == pytest.approx(
        (0.0, 2 / 3)
    )
    assert squad_scores("france", ["Paris", "France."]) == (1.0, 1.0)


def test_squad_metric_averages_in_percent_and_merges_by_summing() -> None:
    predictions = ["Paris", "1889", "London"]
    golds = [["Paris, France"], ["in 1889"], ["Paris"]]
    em, f1_metric = SquadScore(score="em"), SquadScore(score="f1")
    for metric in (em, f1_metric):
        metric.update(predictions, golds)
    assert float(em.compute()) == pytest.approx(0.0)
    assert float(f1_metric.compute()) == pytest.approx(100 * (2 / 3 + 2 / 3 + 0) / 3, rel=1e-6)
    # Two processes' states summed (what DDP does) give the whole set's score.
    first, second = SquadScore(score="f1"), SquadScore(score="f1")
    first.update(predictions[:1], golds[:1])
    second.update(predictions[1:], golds[1:])
    first.merge_state(second)
    assert float(first.compute()) == pytest.approx(float(f1_metric.compute()), rel=1e-6)
    assert int(first.count) == 3


# --------------------------------------------------------------------------- characters -> tokens


def test_answer_characters_map_to_wordpiece_tokens_through_offsets() -> None:
    tokenizer = _wordpiece(CONTEXT * 3, vocab_size=60)  # small: words split into ## pieces
    [(ids, offsets)] = tokenizer.encode_batch_with_offsets([CONTEXT])
    assert any(tokenizer.decode([i]).startswith("##") for i in ids), "pieces inside words"
    start = CONTEXT.index("Gustave Eiffel")
    first, last = answer_tokens(offsets, start, start + len("Gustave Eiffel"))
    assert CONTEXT[offsets[first][0] : offsets[last][1]] == "Gustave Eiffel"
    assert tokenizer.decode(ids[first : last + 1]) == "gustave eiffel"  # lowercased pieces
    assert offsets[first - 1][1] <= start, "the token before the answer lies outside it"
    # An answer starting inside a piece maps to the piece holding it.
    inner = CONTEXT.index("889")
    first, last = answer_tokens(offsets, inner, inner + 3)
    assert CONTEXT[offsets[first][0] : offsets[last][1]] in ("1889", "889")
    assert answer_tokens(offsets, len(CONTEXT) + 5, len(CONTEXT) + 9) is None


def test_windows_cover_a_long_context_and_a_cut_answer_points_at_cls() -> None:
    context_ids = list(range(100, 120))  # 20 context tokens
    offsets = [(i, i + 1) for i in range(20)]
    question = [7, 8]
    room = 10 - len(question) - 3  # 5 context tokens per window
    cut = split_windows(question, context_ids, offsets, (12, 13), max_length=10, doc_stride=None)
    assert len(cut) == 1 and cut[0].context_ids == context_ids[:room] and cut[0].answer is None
    strided = split_windows(question, context_ids, offsets, (12, 13), max_length=10, doc_stride=3)
    assert [w.context_offsets[0][0] for w in strided] == [0, 3, 6, 9, 12, 15]
    assert [w.answer for w in strided] == [None, None, None, (3, 4), (0, 1), None]

    objective = QuestionAnsweringObjective()
    objective.pad_id, objective.cls_id, objective.sep_id = 0, 1, 2
    item = QAItem("q", "x" * 20, ["xx"], [cut[0], strided[3]])
    batch = objective.collate([item])
    assert batch["labels"].tolist() == [[0, 0], [1 + 2 + 1 + 3, 1 + 2 + 1 + 4]]
    assert batch["input_ids"][1].tolist() == [1, 7, 8, 2, 109, 110, 111, 112, 113, 2]
    assert batch["token_type_ids"][1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert batch["spans"].question_of == [0, 0]
    # Moving a batch to a device (what Lightning does) moves the tensors, passes `spans` over.
    from lightning.fabric.utilities.apply_func import move_data_to_device

    moved = move_data_to_device(batch, torch.device("cpu"))
    assert moved["spans"] is batch["spans"]


# --------------------------------------------------------------------------- span decoding


def test_best_span_keeps_end_after_start_within_length_and_context() -> None:
    T = 10
    context = torch.zeros(1, T, dtype=torch.bool)
    context[0, 2:9] = True  # positions 2..8; 0 is [CLS], 1 a question token, 9 [SEP]
    start, end = torch.zeros(1, T), torch.zeros(1, T)
    start[0, 6], end[0, 3] = 5.0, 5.0  # the best pair, 10, ends before it starts
    end[0, 7] = 2.0
    start[0, 0], end[0, 0] = 9.0, 9.0  # [CLS] is outside the context
    starts, ends, scores = best_spans(start, end, context, max_answer_length=30)
    assert (int(starts), int(ends), float(scores)) == (6, 7, 7.0)

    start, end = torch.zeros(1, T), torch.zeros(1, T)
    start[0, 2], end[0, 8] = 4.0, 4.0  # 7 tokens long: 8
    start[0, 5], end[0, 6] = 1.0, 2.0  # (2, 6): 6, (5, 8): 5
    assert [int(x) for x in best_spans(start, end, context, max_answer_length=7)[:2]] == [2, 8]
    assert [int(x) for x in best_spans(start, end, context, max_answer_length=6)[:2]] == [2, 6]
    empty = torch.zeros(1, T, dtype=torch.bool)
    assert float(best_spans(start, end, empty, max_answer_length=6)[2]) == float("-inf")


def test_prediction_is_the_context_text_of_the_best_window() -> None:
    tokenizer = _wordpiece(CONTEXT, vocab_size=200)
    [(ids, offsets)] = tokenizer.encode_batch_with_offsets([CONTEXT])
    windows = split_windows([5], ids, offsets, None, max_length=12, doc_stride=4)
    sources = SpanSources()
    sources.add(QAItem("q", CONTEXT, ["Paris"], windows))
    paris, france = (
        next(o for o in offsets if CONTEXT[o[0] : o[1]] == word) for word in ("Paris", "France")
    )
    w = max(i for i, win in enumerate(windows) if {paris, france} <= set(win.context_offsets))
    local = windows[w].context_offsets.index(paris)
    assert w > 0 and windows[w].context_offsets[local + 2] == france  # Paris , France
    first = 3  # [CLS] question [SEP]
    logits = torch.zeros(len(windows), 12, 2)
    logits[w, first + local, 0] = logits[w, first + local + 2, 1] = 8.0
    logits[0, first, 0] = logits[0, first, 1] = 7.0  # another window's weaker one-token span
    objective = QuestionAnsweringObjective(max_answer_length=30)
    assert objective.predict(logits, sources) == ["Paris, France"]
    # Too long for max_answer_length=2: the other window's span wins.
    short = QuestionAnsweringObjective(max_answer_length=2)
    first_token = CONTEXT[windows[0].context_offsets[0][0] : windows[0].context_offsets[0][1]]
    assert short.predict(logits, sources) == [first_token]


# --------------------------------------------------------------------------- data=squad


def test_squad_data_skips_and_reports_a_malformed_question(tmp_path: Path, caplog) -> None:
    path = _tiny_squad(tmp_path / "tiny.json")
    with pytest.raises(UserError, match="question id q-bad.*does not match the context"):
        SquadDataModule(train_path=str(path), val_path=str(path)).examples()
    data = SquadDataModule(train_path=str(path), val_path=str(path), on_bad_row="skip")
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        train, val = data.examples()
    assert [e.id for e in train] == ["q-when", "q-where", "q-boil"]
    assert "skipped 1 bad row" in caplog.text and "question id q-bad" in caplog.text
    text, _ = data.split_text()
    assert text.count(CONTEXT) == 1 and "Where is the tower?" in text  # contexts once

    tokenizer = _wordpiece(text)
    objective = QuestionAnsweringObjective()
    objective.bind(tokenizer)
    data.attach(tokenizer, objective.collate)
    batch = next(iter(data.val_dataloader()))
    assert batch["spans"].answers == [["1889"], ["Paris, France", "Paris"], ["100 degrees"]]
    for row, (start, end) in enumerate(batch["labels"].tolist()):  # targets hold the answers
        text = batch["spans"].text(row, start, end)
        assert text == batch["spans"].answers[batch["spans"].question_of[row]][0]


def test_an_answer_cut_away_by_max_length_points_at_cls_and_is_counted(tmp_path: Path) -> None:
    path = _tiny_squad(tmp_path / "tiny.json")
    data = SquadDataModule(
        train_path=str(path),
        val_path=str(path),
        on_bad_row="skip",
        max_length=20,
        max_query_length=6,
        doc_stride=None,
    )
    tokenizer = _wordpiece(data.split_text()[0], vocab_size=200)  # whole words
    objective = QuestionAnsweringObjective()
    objective.bind(tokenizer)
    data.attach(tokenizer, objective.collate)
    # 20 - 3 specials - 5 question tokens leave 12 context tokens: "Paris, France" is cut.
    assert data.windows_without_answer == {"train": 1, "val": 1}
    labels = objective.collate(data.val_set)["labels"].tolist()
    assert labels[1] == [0, 0] and labels[0] != [0, 0] and labels[2] != [0, 0]
    with pytest.raises(UserError, match="data.max_length=8 leaves no context tokens"):
        SquadDataModule(train_path=str(path), val_path=str(path), max_length=8, max_query_length=5)


def test_qa_needs_question_data_and_two_segments(tmp_path: Path) -> None:

    with pytest.raises(UserError, match=r"objective=qa trains on questions.*\['squad'\]"):
        compose_config(tmp_path, ["objective=qa", "arch=encoder"])
    path = _tiny_squad(tmp_path / "tiny.json")
    squad = ["data=squad", f"data.train_path={path}", f"data.val_path={path}"]
    with pytest.raises(UserError, match="type_vocab_size >= 2"):
        compose_config(tmp_path, ["experiment=bert_squad", *squad, "model.type_vocab_size=0"])
    with pytest.raises(UserError, match="data.max_length=256 .* model.pos.max_positions=128"):
        compose_config(tmp_path, ["experiment=bert_squad", *squad, "data.max_length=256"])
    with pytest.raises(UserError, match="data.doc_stride=0 is not valid: use an integer >= 1"):
        compose_config(tmp_path, ["experiment=bert_squad", *squad, "data.doc_stride=0"])


# --------------------------------------------------------------------------- end to end


def test_bert_squad_after_mlm_pretraining_runs_and_reports_em_and_f1(tmp_path: Path) -> None:
    """BERT's two steps: masked-LM pretraining, then experiment=bert_squad from its weights."""
    from xfmr.training.run import run_training

    pre = tmp_path / "mlm"
    pre.mkdir()
    encoder = ["arch=encoder", "size=tiny", "tokenizer=wordpiece", "tokenizer.vocab_size=120"]
    run_training(compose_config(pre, [*encoder, "objective=mlm", "model.pos.max_positions=128"]))

    path = _tiny_squad(tmp_path / "tiny.json")
    squad = ["data=squad", f"data.train_path={path}", f"data.val_path={path}"]
    short = ["data.max_length=24", "data.max_query_length=8", "data.doc_stride=4"]
    overrides = ["experiment=bert_squad", *squad, "data.on_bad_row=skip", *short, "size=tiny"]
    compose_config(tmp_path, [*overrides, "tokenizer.vocab_size=120"])
    fine = tmp_path / "qa"
    fine.mkdir()
    results = run_training(compose_config(fine, [*overrides, f"init_from={pre / 'run'}"]))

    assert results["step"] == 2
    metrics = results["metrics"]
    assert 0.0 <= metrics["val/em"] <= metrics["val/f1"] <= 100.0 and metrics["val/loss"] > 0
    assert results["history"][-1]["val/f1"] == pytest.approx(metrics["val/f1"])
    # The whole encoder comes from the MLM run; only the span head is new.
    assert sorted(results["init_from"]["new"]) == ["span_head.bias", "span_head.weight"]
    assert not any(name.startswith("backbone.") for name in results["init_from"]["skipped"])


FILLERS = "river stone cloud bread lamp horse window garden music paper forest table".split()
COLOURS = "red blue green black white yellow orange purple".split()


def _pattern_squad(path: Path, n: int, seed: int) -> Path:
    """Filler words with "the key is COLOUR" somewhere; the question asks for the colour."""
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        words = [rng.choice(FILLERS) for _ in range(rng.randint(6, 14))]
        colour = rng.choice(COLOURS)
        at = rng.randint(0, len(words))
        words[at:at] = ["the", "key", "is", colour]
        context = " ".join(words) + "."
        start = len(" ".join(words[: at + 3])) + 1
        answer = {"text": colour, "answer_start": start}
        question = {"id": f"p{i}", "question": "what colour is the key?", "answers": [answer]}
        paragraphs.append({"context": context, "qas": [question]})
    path.write_text(json.dumps({"data": [{"title": "pattern", "paragraphs": paragraphs}]}))
    return path


def test_a_tiny_encoder_learns_to_find_a_fixed_pattern_answer(tmp_path: Path) -> None:
    from xfmr.nn.config import ModelConfig, PosConfig

    torch.manual_seed(0)
    data = SquadDataModule(
        train_path=str(_pattern_squad(tmp_path / "train.json", 400, seed=0)),
        val_path=str(_pattern_squad(tmp_path / "val.json", 64, seed=1)),
        max_length=32,
        max_query_length=8,
        batch_size=16,
    )
    tokenizer = _wordpiece(data.split_text()[0], vocab_size=100)
    objective = QuestionAnsweringObjective()
    objective.bind(tokenizer)
    data.attach(tokenizer, objective.collate)
    config = ModelConfig(
        arch="encoder",
        vocab_size=tokenizer.vocab_size,
        n_layers=2,
        n_heads=2,
        d_model=64,
        placement="post",
        activation="gelu",
        type_vocab_size=2,
        embed_norm=True,
        dropout=0.0,
        attn_dropout=0.0,
        pos=PosConfig(name="learned", max_positions=32),
    )
    model = objective.build_model(config)
    before = _validate(model, objective, data)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    batches = iter(data.train_dataloader())  # 400 windows: 25 batches an epoch
    for step in range(50):
        if step % 25 == 0:
            batches = iter(data.train_dataloader())
        (batch,) = next(batches)  # a window of one batch: one optimizer step
        sums, _ = objective.forward(model, batch)
        loss = sums["windows"] / objective.counts(batch)["windows"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = _validate(model, objective, data)
    print(f"val EM/F1 before {before}, after 50 steps {after}")
    assert before["f1"] < 30.0
    assert after["f1"] > 70.0 and after["em"] > 60.0


def _validate(model, objective, data) -> dict[str, float]:
    metrics = objective.metrics()
    model.eval()
    with torch.no_grad():
        for batch in data.val_dataloader():
            _, logits = objective.forward(model, batch)
            objective.update_metrics(metrics, logits, batch)
    model.train()
    return {name: round(float(metric.compute()), 2) for name, metric in metrics.items()}
