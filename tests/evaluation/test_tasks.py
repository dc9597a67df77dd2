"""The rows of xfmr's shipped lm-eval tasks (xfmr.evaluation.tasks): minimal pairs that the toy
language's own rules call grammatical and ungrammatical, next-line questions drawn only from the
validation tail of the run's text, and the test pairs of a parallel run."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.config import compose_config
from xfmr.data import synthetic
from xfmr.data.sources import DATA_SETS
from xfmr.errors import UserError
from xfmr.evaluation.tasks import (
    CONTEXT_LINES,
    ENDINGS,
    MULTI30K_TEST,
    NEXT_LINE_QUESTIONS,
    PAIRS_PER_PHENOMENON,
    TaskInputs,
    minimal_pairs,
    next_line_questions,
    translation_pairs,
    validation_text,
)

# -- the toy language's rules, read back from a sentence ----------------------------------------


def _noun_phrase(words: list[str], i: int) -> tuple[int, bool] | None:
    """(index after the phrase, plural) of the noun phrase at `words[i]`, or None."""
    if i >= len(words):
        return None
    j = i + 1 + (i + 1 < len(words) and words[i + 1] in synthetic._ADJECTIVES)
    noun = words[j] if j < len(words) else ""
    plural = noun not in synthetic._NOUNS
    if plural and not (noun.endswith("s") and noun[:-1] in synthetic._NOUNS):
        return None
    if words[i] not in (("the", "some", "two") if plural else ("the", "a", "an")):
        return None
    if words[i] in ("a", "an") and (words[i] == "an") != (words[i + 1][0] in "aeiou"):
        return None
    return j + 1, plural


def _agrees(words: list[str], i: int, plural: bool) -> bool:
    verbs = {synthetic._inflect(verb, plural) for verb in synthetic._VERBS}
    return i < len(words) and words[i] in verbs


def grammatical(sentence: str) -> bool:
    """Whether `sentence` follows the toy language's rules: subject [that verb object] verb
    object [place], each verb of the subject's number, "an" before a vowel and "a" before
    anything else."""
    words = sentence.removesuffix(".").split()
    subject = _noun_phrase(words, 0)
    if not sentence.endswith(".") or subject is None:
        return False
    i, plural = subject
    if i < len(words) and words[i] == "that":
        inner = _noun_phrase(words, i + 2) if _agrees(words, i + 1, plural) else None
        if inner is None:
            return False
        i = inner[0]
    if not _agrees(words, i, plural):
        return False
    object_ = _noun_phrase(words, i + 1)
    rest = " ".join(words[object_[0] :]) if object_ else None
    return rest == "" or rest in synthetic._PLACES


def test_the_rules_accept_every_sentence_the_language_makes_and_refuse_broken_ones() -> None:
    rng = random.Random(7)
    made = [synthetic.sentence(rng) for _ in range(3000)]
    assert all(grammatical(s) for s in made), [s for s in made if not grammatical(s)][:3]
    for broken in (
        "the cat see a dog.",  # a singular subject, a plural verb
        "two cats sees a dog.",
        "the cat that sees two dogs chase a fox.",  # agreement past the relative clause
        "the cat that see two dogs chases a fox.",
        "the cat sees a owl.",
        "an cat sees the owl.",
        "the cat sees a dog near the sea.",
        "a cats sees the dog.",
    ):
        assert not grammatical(broken), broken


# -- xfmr_minimal_pairs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs() -> dict[str, list[dict]]:
    return minimal_pairs()


def test_each_pair_is_a_grammatical_sentence_and_one_word_broken(pairs) -> None:
    assert list(pairs) == [f"xfmr_minimal_pairs_{p}" for p in synthetic.PHENOMENA]
    for task, rows in pairs.items():
        assert len(rows) == PAIRS_PER_PHENOMENON
        assert len({row["sentence_good"] for row in rows}) == len(rows), task
        for row in rows:
            good, bad = row["sentence_good"].split(), row["sentence_bad"].split()
            assert grammatical(row["sentence_good"]), row
            assert not grammatical(row["sentence_bad"]), row
            changed = [i for i, (g, b) in enumerate(zip(good, bad, strict=True)) if g != b]
            assert len(changed) == 1 and changed[0] > 0, row  # never the first word
            assert task.endswith(row["phenomenon"])


def _changed(row: dict) -> tuple[str, str]:
    """(good word, bad word) where the pair differs."""
    good, bad = row["sentence_good"].split(), row["sentence_bad"].split()
    ((g, b),) = [(g, b) for g, b in zip(good, bad, strict=True) if g != b]
    return g, b


def test_each_phenomenon_breaks_its_own_rule_both_ways(pairs) -> None:
    a_an = [_changed(row) for row in pairs["xfmr_minimal_pairs_a_an"]]
    assert {g for g, _ in a_an} == {"a", "an"} and all({g, b} == {"a", "an"} for g, b in a_an)
    for task in ("xfmr_minimal_pairs_agreement", "xfmr_minimal_pairs_agreement_relative_clause"):
        verbs = {synthetic._inflect(v, p) for v in synthetic._VERBS for p in (False, True)}
        assert all(set(_changed(row)) <= verbs for row in pairs[task]), task
        numbers = {_noun_phrase(row["sentence_good"].split(), 0)[1] for row in pairs[task]}
        assert numbers == {False, True}, task  # singular and plural subjects
    for row in pairs["xfmr_minimal_pairs_agreement"]:
        assert "that" not in row["sentence_good"].split(), row
    for row in pairs["xfmr_minimal_pairs_agreement_relative_clause"]:
        words = row["sentence_good"].removesuffix(".").split()
        end, plural = _noun_phrase(words, 0)
        assert words[end] == "that"
        _, inner_plural = _noun_phrase(words, end + 2)
        assert inner_plural != plural, row  # the nearer noun has the other number


def test_minimal_pairs_are_the_same_for_the_seed_and_change_with_it(pairs) -> None:
    assert minimal_pairs() == pairs
    assert minimal_pairs(seed=1) != pairs
    fewer = minimal_pairs(per_phenomenon=10)
    assert all(fewer[task] == rows[:10] for task, rows in pairs.items())


# -- xfmr_next_line -------------------------------------------------------------------------------


def _play(speeches: int = 120) -> str:
    """A play of unique lines: speakers' names, two or three lines of speech, blank lines."""
    lines = []
    for k in range(speeches):
        lines += [f"SPEAKER NUMBER {k:04d}:", f"the first words of speech {k:04d} here"]
        lines += [f"and the words that follow in {k:04d}"] * (1 + k % 2)
        lines[-1] = lines[-1] + (" again" if k % 2 else "")
        lines.append("")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def text_run(tmp_path_factory) -> tuple[SimpleNamespace, str, str]:
    """A run of data=text over `_play()`, and the text's training and validation parts cut as
    data.val_fraction says (the tail)."""
    root = tmp_path_factory.mktemp("text_run")
    text = _play()
    (root / "play.txt").write_text(text)
    config = compose_config(
        root, ["data=text", f"data.path={root / 'play.txt'}", "data.val_fraction=0.33"]
    )
    cut = int(len(text) * (1.0 - 0.33))
    assert text[cut - 1] != "\n"  # the cut falls mid-line: that line is in neither part whole
    return SimpleNamespace(config=config), text[:cut], text[cut:]


def test_next_line_questions_come_only_from_the_validation_tail(text_run) -> None:
    run, training, validation = text_run
    assert validation_text(run.config) == validation
    questions = next_line_questions(validation_text(run.config))
    assert 10 < len(questions) <= NEXT_LINE_QUESTIONS
    whole_lines = set((training + validation).split("\n"))  # not the one the cut falls in
    for q in questions:
        lines = [line for line in q["context"].split("\n") if line.strip()]
        assert len(lines) == CONTEXT_LINES
        for line in [*lines, *q["endings"]]:
            assert line in whole_lines and line not in training and line in validation, line
        assert len(q["endings"]) == len(set(q["endings"])) == ENDINGS
        true_ending = q["endings"][q["label"]]
        assert f"{q['context']}\n{true_ending}\n" in validation
        for wrong in q["endings"][: q["label"]] + q["endings"][q["label"] + 1 :]:
            assert f"{q['context']}\n{wrong}\n" not in validation
            assert not wrong.endswith(":")
    assert {q["label"] for q in questions} == set(range(ENDINGS))


def test_next_line_questions_are_the_same_for_the_seed(text_run) -> None:
    _, _, validation = text_run
    questions = next_line_questions(validation)
    assert next_line_questions(validation) == questions
    assert next_line_questions(validation, seed=1) != questions
    assert len(next_line_questions(validation, count=5)) == 5


def test_next_line_refuses_too_little_text_and_a_run_without_a_text_corpus(tmp_path) -> None:
    with pytest.raises(UserError, match="xfmr_next_line needs 7 distinct lines .* which has 1: "):
        next_line_questions("cut\none two three\nfour five six\nseven eight nine\nten 11 12\n")
    config = compose_config(tmp_path, [*_parallel(tmp_path)])
    with pytest.raises(UserError, match=r"^xfmr_next_line reads .* gives pairs$"):
        validation_text(config)


# -- xfmr_translation -----------------------------------------------------------------------------

GERMAN = ["ein hund läuft", "zwei katzen schlafen", "ein kind spielt"]
ENGLISH = ["a dog runs", "two cats sleep", "a child plays"]


def _parallel(folder: Path, *, test: bool = True) -> list[str]:
    """Overrides of an encoder-decoder run over aligned files in `folder`, laid out as
    `xfmr-data get multi30k` lays them out (the test split beside them unless `test` is
    False)."""
    for split in ("train", "val", *([MULTI30K_TEST] if test else [])):
        (folder / f"{split}.de").write_text("\n".join(GERMAN) + "\n")
        (folder / f"{split}.en").write_text("\n".join(ENGLISH) + "\n")
    files = [f"data.{s}_{side}={folder}/{s}.{lang}" for s in ("train", "val") for side, lang in (("source", "de"), ("target", "en"))]  # fmt: skip
    return ["arch=encoder_decoder", "objective=seq2seq", "data=parallel", *files]


def test_translation_reads_the_test_split_beside_the_training_files(tmp_path) -> None:
    config = compose_config(tmp_path, _parallel(tmp_path))
    rows = translation_pairs(TaskInputs(config))
    assert rows == [{"source": g, "target": e} for g, e in zip(GERMAN, ENGLISH, strict=True)]
    (tmp_path / "other.de").write_text("ein vogel singt\n")
    (tmp_path / "other.en").write_text("a bird sings\n")
    given = (tmp_path / "other.de", tmp_path / "other.en")
    assert translation_pairs(TaskInputs(config, given)) == [
        {"source": "ein vogel singt", "target": "a bird sings"}
    ]


def test_translation_refuses_a_run_without_its_test_split_or_parallel_data(
    tmp_path, text_run
) -> None:
    config = compose_config(tmp_path, _parallel(tmp_path, test=False))
    with pytest.raises(UserError, match=rf"{MULTI30K_TEST}\.de, .*{MULTI30K_TEST}\.en missing"):
        translation_pairs(TaskInputs(config))
    with pytest.raises(UserError, match=r"^xfmr_translation translates .* gives text$"):
        translation_pairs(TaskInputs(text_run[0].config))


def test_the_test_split_name_is_the_one_xfmr_data_lays_out() -> None:
    (multi30k,) = [d for d in DATA_SETS if d.name == "multi30k"]
    paths = {f.path for f in multi30k.files}
    assert {f"multi30k/{MULTI30K_TEST}.de", f"multi30k/{MULTI30K_TEST}.en"} <= paths
