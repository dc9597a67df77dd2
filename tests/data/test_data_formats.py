"""Dataset file readers: each parses tiny files written here, good rows and bad."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import pytest

from xfmr.data.formats.bad_rows import BadRows
from xfmr.data.formats.conll import TaggedSentence, read_conll
from xfmr.data.formats.delimited import TextExample, read_delimited
from xfmr.data.formats.parallel import read_parallel, read_parallel_jsonl
from xfmr.data.formats.squad import QAExample, read_squad
from xfmr.errors import UserError

SHARED = Path("/work/shared/data")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- common behaviour


@pytest.mark.parametrize(
    "read",
    [
        lambda p: read_parallel(p, p),
        read_parallel_jsonl,
        lambda p: read_delimited(p, text_field="text", label_field="label"),
        read_conll,
        read_squad,
    ],
)
def test_missing_and_empty_files_name_the_file(tmp_path: Path, read) -> None:
    missing = tmp_path / "nope.tsv"
    with pytest.raises(UserError, match=r"nope\.tsv.*does not exist"):
        read(missing)
    empty = write(tmp_path / "empty.tsv", "")
    with pytest.raises(UserError, match=r"empty\.tsv.*is empty"):
        read(empty)


def test_on_bad_row_must_be_skip_or_error(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"source": "a", "target": "b"}\n')
    with pytest.raises(UserError, match=r"on_bad_row='ignore'.*'skip' or 'error'"):
        read_parallel_jsonl(path, on_bad_row="ignore")


def test_bad_rows_summary_counts_per_file_and_first_reasons(tmp_path: Path) -> None:
    _, none_bad = read_parallel_jsonl(write(tmp_path / "ok.jsonl", '{"source":"a","target":"b"}'))
    assert none_bad.summary() == "no bad rows skipped"
    lines = "".join(f'{{"source": "s{i}"}}\n' for i in range(5))
    _, bad = read_parallel_jsonl(write(tmp_path / "p.jsonl", lines), on_bad_row="skip")
    summary = bad.summary(first=2)
    assert f"skipped 5 bad row(s): 5 in {tmp_path / 'p.jsonl'}" in summary
    assert "p.jsonl:1: missing field 'target'" in summary
    assert "p.jsonl:2:" in summary and "p.jsonl:3:" not in summary
    assert "... and 3 more" in summary


# --------------------------------------------------------------------------- parallel


def test_read_parallel_pairs_aligned_lines(tmp_path: Path) -> None:
    src = write(tmp_path / "train.de", "Ein Hund.\r\nZwei Katzen.\r\n")
    tgt = write(tmp_path / "train.en", "A dog.\nTwo cats.")
    pairs, bad = read_parallel(src, tgt)
    assert pairs == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    assert len(bad) == 0


def test_read_parallel_mismatched_line_counts_names_both_files(tmp_path: Path) -> None:
    src = write(tmp_path / "train.de", "a\nb\nc\n")
    tgt = write(tmp_path / "train.en", "a\nb\n")
    with pytest.raises(UserError) as info:
        read_parallel(src, tgt)
    message = str(info.value)
    assert "train.de" in message and "has 3 lines" in message
    assert "train.en" in message and "has 2" in message


def test_read_parallel_empty_line_is_a_bad_row(tmp_path: Path) -> None:
    src = write(tmp_path / "s.txt", "a\n\nc\n")
    tgt = write(tmp_path / "t.txt", "A\nB\n  \n")
    with pytest.raises(UserError, match=r"s\.txt:2: empty line in .*s\.txt"):
        read_parallel(src, tgt)
    pairs, bad = read_parallel(src, tgt, on_bad_row="skip")
    assert pairs == [("a", "A")]
    assert [row.line for row in bad] == [2, 3]
    assert "t.txt" in bad.rows[1].reason


def test_read_parallel_jsonl_custom_fields_and_bad_rows(tmp_path: Path) -> None:
    lines = [
        json.dumps({"de": "Hallo", "en": "Hello"}),
        "",  # blank lines are not rows
        "{not json",
        json.dumps(["de", "en"]),
        json.dumps({"de": "Ja", "en": ""}),
        json.dumps({"de": "Nein", "en": 3}),
        json.dumps({"de": "Danke", "en": "Thanks"}),
    ]
    path = write(tmp_path / "pairs.jsonl", "\n".join(lines) + "\n")
    pairs, bad = read_parallel_jsonl(path, "de", "en", on_bad_row="skip")
    assert pairs == [("Hallo", "Hello"), ("Danke", "Thanks")]
    assert [row.line for row in bad] == [3, 4, 5, 6]
    reasons = [row.reason for row in bad]
    assert "not valid JSON" in reasons[0]
    assert "expected a JSON object, found list" in reasons[1]
    assert "field 'en' is empty" in reasons[2]
    assert "field 'en' must be a string, found int" in reasons[3]
    with pytest.raises(UserError, match=r"pairs\.jsonl:3: not valid JSON"):
        read_parallel_jsonl(path, "de", "en")


# --------------------------------------------------------------------------- delimited


def test_tsv_with_detected_header(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", 'label\tsentence\r\n0\ta "quoted" film\r\n1\tgood\r\n')
    examples, bad = read_delimited(path, text_field="sentence", label_field="label")
    assert examples == [TextExample('a "quoted" film', "0"), TextExample("good", "1")]
    assert len(bad) == 0


def test_tsv_without_header_uses_column_indices(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", "0\tbad film\n1\tgood film\n")
    examples, _ = read_delimited(path, text_field=1, label_field=0)
    assert [(e.text, e.label) for e in examples] == [("bad film", "0"), ("good film", "1")]
    # An explicit header flag drops the first row even with indices.
    examples, _ = read_delimited(path, text_field=-1, label_field=0, has_header=True)
    assert [e.text for e in examples] == ["good film"]


def test_names_without_header_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", "0\tbad film\n")
    with pytest.raises(UserError, match=r"not all in the first row.*column indices"):
        read_delimited(path, text_field="sentence", label_field="label")
    with pytest.raises(UserError, match=r"no header.*0\.\.1"):
        read_delimited(path, text_field="sentence", label_field="label", has_header=False)
    with pytest.raises(UserError, match=r"column index 5 is out of range.*0\.\.1"):
        read_delimited(path, text_field=5, label_field=0)


def test_csv_with_pair_quoting_and_bad_rows(tmp_path: Path) -> None:
    text = (
        "premise,hypothesis,label\n"
        '"A man, smiling",A man is happy,entailment\n'
        "A cat,,neutral\n"  # empty pair text
        "A dog,A dog runs,maybe\n"  # unknown label
        "too,many,columns,here\n"
        "A bird,A bird flies,contradiction\n"
    )
    path = write(tmp_path / "nli.csv", text)
    kwargs = dict(
        text_field="premise",
        text_pair_field="hypothesis",
        label_field="label",
        labels=["entailment", "neutral", "contradiction"],
    )
    examples, bad = read_delimited(path, **kwargs, on_bad_row="skip")
    assert examples == [
        TextExample("A man, smiling", "entailment", "A man is happy"),
        TextExample("A bird", "contradiction", "A bird flies"),
    ]
    assert [row.line for row in bad] == [3, 4, 5]
    assert "column 'hypothesis' is empty" in bad.rows[0].reason
    assert "unknown label 'maybe'" in bad.rows[1].reason and "'neutral'" in bad.rows[1].reason
    assert "4 columns, expected 3" in bad.rows[2].reason
    with pytest.raises(UserError, match=r"nli\.csv:3: column 'hypothesis' is empty"):
        read_delimited(path, **kwargs)


def test_jsonl_classification_with_numeric_labels(tmp_path: Path) -> None:
    lines = [
        {"text": "fine", "label": 1},
        {"text": "awful", "label": 0},
        {"text": "what", "label": 7},
        {"label": 1},
        {"text": "   ", "label": 0},
    ]
    path = write(tmp_path / "d.jsonl", "".join(json.dumps(x) + "\n" for x in lines))
    examples, bad = read_delimited(
        path, text_field="text", label_field="label", labels=["0", "1"], on_bad_row="skip"
    )
    assert examples == [TextExample("fine", "1"), TextExample("awful", "0")]
    assert [(row.line, row.reason.split(";")[0]) for row in bad] == [
        (3, "unknown label '7'"),
        (4, "missing field 'text'"),
        (5, "field 'text' is empty"),
    ]
    with pytest.raises(UserError, match=r"d\.jsonl:3: unknown label '7'; valid labels"):
        read_delimited(path, text_field="text", label_field="label", labels=["0", "1"])
    with pytest.raises(UserError, match="key names, not column indices"):
        read_delimited(path, text_field=0, label_field=1)


def test_unknown_suffix_needs_a_delimiter(tmp_path: Path) -> None:
    path = write(tmp_path / "data.txt", "a|1\nb|0\n")
    with pytest.raises(UserError, match=r"data\.txt.*'\.txt'.*\.tsv, \.csv or \.jsonl"):
        read_delimited(path, text_field=0, label_field=1)
    examples, _ = read_delimited(path, text_field=0, label_field=1, delimiter="|")
    assert [e.label for e in examples] == ["1", "0"]


# --------------------------------------------------------------------------- CoNLL

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-ORG
rejects VBZ O
German JJ B-MISC

Peter NNP B-PER
Blackburn NNP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-LOC
"""


def test_conll_sentences_skip_docstart_and_blank_lines(tmp_path: Path) -> None:
    sentences, bad = read_conll(write(tmp_path / "train.txt", CONLL))
    assert sentences == [
        TaggedSentence(["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
        TaggedSentence(["Peter", "Blackburn"], ["B-PER", "I-PER"]),
        TaggedSentence(["BRUSSELS"], ["B-LOC"]),
    ]
    assert len(bad) == 0
    pos, _ = read_conll(write(tmp_path / "train.txt", CONLL), tag_column=1, tag_scheme=None)
    assert pos[0].tags == ["NNP", "VBZ", "JJ"]


def test_conll_bad_tags_and_columns_drop_the_sentence(tmp_path: Path) -> None:
    text = (
        "EU NNP B-ORG\n"
        "rejects VBZ O\n"
        "\n"
        "Peter NNP PER\n"  # line 4: not IOB2
        "\n"
        "Mr NNP O\n"
        "Blackburn NNP I-PER\n"  # line 7: I- without B-
        "\n"
        "a O\n"  # line 9: 2 columns, the file has 3
        "\n"
        "Bonn NNP B-LOC\n"
        "said VBD O\tx\n"  # line 12: 4 columns
    )
    path = write(tmp_path / "bad.txt", text)
    sentences, bad = read_conll(path, on_bad_row="skip")
    assert [s.tokens for s in sentences] == [["EU", "rejects"]]
    assert [row.line for row in bad] == [4, 7, 9, 12]
    assert "tag 'PER' is not IOB2: use O, B-<type> or I-<type>" in bad.rows[0].reason
    assert "starts with B-PER" in bad.rows[1].reason
    assert "2 columns, expected 3 like line 1" in bad.rows[2].reason
    assert "4 columns, expected 3 like line 1" in bad.rows[3].reason
    assert "sentence starting at line 11" in bad.rows[3].reason
    with pytest.raises(UserError, match=r"bad\.txt:4: tag 'PER' is not IOB2"):
        read_conll(path)


def test_conll_column_out_of_range_and_unknown_scheme(tmp_path: Path) -> None:
    path = write(tmp_path / "t.txt", "EU B-ORG\n")
    with pytest.raises(UserError, match=r"t\.txt:1: tag_column=2 is out of range.*0\.\.1"):
        read_conll(path, tag_column=2)
    with pytest.raises(UserError, match=r"tag_scheme='bioes' is not valid.*'iob2'"):
        read_conll(path, tag_scheme="bioes")


# --------------------------------------------------------------------------- SQuAD


def squad(qas: list[dict], context: str = "Paris is the capital of France.") -> dict:
    return {
        "version": "1.1",
        "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
    }


def test_squad_reads_questions_and_checks_answer_spans(tmp_path: Path) -> None:
    qas = [
        {"id": "q1", "question": "Capital?", "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "q2", "question": "Of?", "answers": [{"text": "France", "answer_start": 5}]},
        {"id": "q3", "question": "Which?", "answers": []},
        {"id": "q4", "question": " ", "answers": [{"text": "Paris", "answer_start": 0}]},
        {
            "id": "q5",
            "question": "Country?",
            "answers": [
                {"text": "France", "answer_start": 24},
                {"text": "France.", "answer_start": 24},
            ],
        },
    ]
    path = write(tmp_path / "dev.json", json.dumps(squad(qas)))
    examples, bad = read_squad(path, on_bad_row="skip")
    context = "Paris is the capital of France."
    assert examples == [
        QAExample("q1", "Capital?", context, [("Paris", 0)]),
        QAExample("q5", "Country?", context, [("France", 24), ("France.", 24)]),
    ]
    assert [row.key for row in bad] == ["question id q2", "question id q3", "question id q4"]
    assert "answer 'France' does not match the context at answer_start=5" in bad.rows[0].reason
    assert "context[5:11] is ' is th'" in bad.rows[0].reason
    assert "no 'answers'" in bad.rows[1].reason
    assert "missing or empty 'question'" in bad.rows[2].reason
    with pytest.raises(UserError, match=r"dev\.json \(question id q2\): answer 'France'"):
        read_squad(path)


def test_squad_structure_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"x\.json:2: not valid JSON"):
        read_squad(write(tmp_path / "x.json", '{"data":\n [}'))
    with pytest.raises(UserError, match=r"y\.json.*not SQuAD JSON.*'data'"):
        read_squad(write(tmp_path / "y.json", '{"articles": []}'))
    path = write(tmp_path / "z.json", json.dumps(squad([{"question": "Who?"}])))
    _, bad = read_squad(path, on_bad_row="skip")
    assert bad.rows[0].key == "data[0].paragraphs[0].qas[0]"
    assert "missing or empty 'id'" in bad.rows[0].reason


# --------------------------------------------------------------------------- real data


def head(path: Path, tmp_path: Path, lines: int) -> Path:
    """The first `lines` lines of a real file, copied byte for byte."""
    copy = tmp_path / path.name
    with path.open("rb") as handle:
        copy.write_bytes(b"".join(islice(handle, lines)))
    return copy


def head_sentences(path: Path, tmp_path: Path, sentences: int) -> Path:
    """The real CoNLL file up to its `sentences`-th blank line, copied byte for byte."""
    copy, kept, blanks = tmp_path / path.name, [], 0
    with path.open("rb") as handle:
        for line in handle:
            kept.append(line)
            blanks += not line.strip()
            if blanks == sentences:
                break
    copy.write_bytes(b"".join(kept))
    return copy


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared datasets are not available")
def test_reader_defaults_fit_the_real_datasets(tmp_path: Path) -> None:
    (tmp_path / "sst2").mkdir()
    sst2 = head(SHARED / "sst2/train.tsv", tmp_path / "sst2", 201)
    examples, bad = read_delimited(
        sst2, text_field="sentence", label_field="label", labels=["0", "1"]
    )
    assert len(examples) == 200 and len(bad) == 0
    assert examples[0] == TextExample("hide new secretions from the parental units", "0")

    (tmp_path / "conll").mkdir()
    conll = head_sentences(SHARED / "conll2003/train.txt", tmp_path / "conll", 200)
    sentences, bad = read_conll(conll)
    assert len(sentences) == 200 and len(bad) == 0
    assert sentences[0].tokens[:2] == ["EU", "rejects"] and sentences[0].tags[0] == "B-ORG"

    (tmp_path / "m30k").mkdir()
    de = head(SHARED / "multi30k/train.de", tmp_path / "m30k", 200)
    en = head(SHARED / "multi30k/train.en", tmp_path / "m30k", 200)
    pairs, bad = read_parallel(de, en)
    assert len(pairs) == 200 and len(bad) == 0
    assert pairs[0][1].startswith("Two young")


def test_bad_rows_is_empty_by_default() -> None:
    assert len(BadRows()) == 0 and list(BadRows()) == []
