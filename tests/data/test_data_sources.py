"""`data=hf` (Hugging Face `datasets`, local files only, offline) as each kind of data, and
`data=parallel` from JSON Lines."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.config import compose_config
from xfmr.data.formats.delimited import TextExample
from xfmr.data.hf import HFLabelledDataModule, HFPairsDataModule, HFTextDataModule, hf_datamodule
from xfmr.data.parallel import ParallelDataModule
from xfmr.errors import UserError


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the hub, and nothing is cached outside tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets.config  # read the variables above at first import; set them if imported

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _hf(tmp_path: Path, **kwargs):
    return hf_datamodule(cache_dir=str(tmp_path / "hf_cache"), **kwargs)


# --------------------------------------------------------------------------- data=hf, each kind


def test_text_kind_joins_the_text_column_of_each_split(tmp_path: Path) -> None:
    train = _jsonl(tmp_path / "train.jsonl", [{"text": "first line", "id": 1}, {"text": "second"}])
    val = _jsonl(tmp_path / "val.jsonl", [{"text": "held out"}])
    data = _hf(
        tmp_path,
        kind="text",
        path="json",
        data_files={"train": str(train), "validation": str(val)},
    )
    assert isinstance(data, HFTextDataModule)
    assert data.split_text() == ("first line\nsecond", "held out")
    same = _hf(tmp_path, kind="text", path="json", data_files=str(train), val_split="train")
    assert same.split_text() == ("first line\nsecond", "first line\nsecond")


def test_text_kind_holds_out_the_tail_fraction_in_order(tmp_path: Path) -> None:
    rows = [{"text": f"line {i}"} for i in range(8)]
    data = _hf(
        tmp_path,
        kind="text",
        path="json",
        data_files=str(_jsonl(tmp_path / "all.jsonl", rows)),
        val_split=None,
        val_fraction=0.25,
    )
    train, val = data.split_text()
    assert train == "\n".join(f"line {i}" for i in range(6))
    assert val == "line 6\nline 7"


def test_labelled_kind_from_csv_reads_text_pairs_and_sorted_labels(tmp_path: Path) -> None:
    header = "premise,hypothesis,label\n"
    (tmp_path / "train.csv").write_text(
        header + "a cat sleeps,an animal rests,yes\na dog runs,a cat sleeps,no\n"
    )
    (tmp_path / "dev.csv").write_text(header + "birds fly,birds move,yes\n")
    data = _hf(
        tmp_path,
        kind="labelled",
        path="csv",
        data_files={"train": str(tmp_path / "train.csv"), "validation": str(tmp_path / "dev.csv")},
        text_field="premise",
        text_pair_field="hypothesis",
    )
    assert isinstance(data, HFLabelledDataModule)
    train, val = data.examples()
    assert train == [
        TextExample("a cat sleeps", "yes", "an animal rests"),
        TextExample("a dog runs", "no", "a cat sleeps"),
    ]
    assert val == [TextExample("birds fly", "yes", "birds move")]
    assert data.label_names() == ["no", "yes"]


def test_labelled_kind_keeps_a_class_label_columns_names_and_order(tmp_path: Path) -> None:
    """A ClassLabel column (as hub datasets have) gives its own names, in its own index order;
    GLUE-style -1 ("no label") rows are bad rows."""
    from datasets import ClassLabel, Dataset, Features, Value

    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["pos", "neg"])})
    rows = {"sentence": ["good", "bad", "unlabelled", "fine"], "label": [0, 1, -1, 0]}
    Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "train.parquet"))
    options = dict(
        kind="labelled",
        path="parquet",
        data_files=str(tmp_path / "train.parquet"),
        text_field="sentence",
        val_split=None,
        val_fraction=0.25,
    )
    with pytest.raises(
        UserError, match=r"\(row 2\): 'label' is -1, not a class of \['pos', 'neg'\]"
    ):
        _hf(tmp_path, **options).examples()
    data = _hf(tmp_path, **options, on_bad_row="skip")
    train, val = data.examples()
    assert data.label_names() == ["pos", "neg"], "the dataset's order, not sorted"
    assert sorted((e.text, e.label) for e in train + val) == [
        ("bad", "neg"),
        ("fine", "pos"),
        ("good", "pos"),
    ]


def test_pairs_kind_reads_the_source_and_target_columns(tmp_path: Path) -> None:
    rows = [{"de": f"eine katze {i}", "en": f"a cat {i}", "note": "x"} for i in range(4)]
    train = _jsonl(tmp_path / "train.jsonl", rows[:3])
    val = _jsonl(tmp_path / "val.jsonl", rows[3:])
    data = _hf(
        tmp_path,
        kind="pairs",
        path="json",
        data_files={"train": str(train), "test": str(val)},
        val_split="test",
        source_field="de",
        target_field="en",
    )
    assert isinstance(data, HFPairsDataModule)
    assert data.pairs() == (
        [("eine katze 0", "a cat 0"), ("eine katze 1", "a cat 1"), ("eine katze 2", "a cat 2")],
        [("eine katze 3", "a cat 3")],
    )


def test_labelled_kind_trains_a_classifier_end_to_end(tmp_path: Path) -> None:
    """Twelve alternating reviews hold out three, of both labels, so no constant answer scores
    above 2/3. The classifier trained on the other nine gets all three right, and its validation
    loss falls to a fraction of its first value and of chance, ln 2."""
    from xfmr.training.run import run_training

    rows = [{"text": "warm fine film", "label": "good"}, {"text": "cold dull film", "label": "bad"}]
    data_file = _jsonl(tmp_path / "reviews.jsonl", rows * 6)
    options = dict(
        kind="labelled",
        path="json",
        data_files=str(data_file),
        val_split=None,
        val_fraction=0.25,
    )
    train_rows, val_rows = _hf(tmp_path, **options).examples()
    assert len(train_rows) == 9 and len(val_rows) == 3
    assert {e.label for e in val_rows} == {"bad", "good"}  # a constant answer gets 2/3 at most
    cfg = compose_config(
        tmp_path,
        [
            "data=hf",
            *(f"data.{key}={'null' if value is None else value}" for key, value in options.items()),
            f"data.cache_dir={tmp_path / 'hf_cache'}",
            "objective=classification",
            "arch=encoder",
            "size=tiny",
            "tokenizer=wordpiece",
            "tokenizer.vocab_size=100",
            "optim.lr=3e-3",
            "trainer.max_steps=40",
            "trainer.val_check_interval=10",
        ],
    )
    results = run_training(cfg)
    assert json.loads((tmp_path / "run" / "labels.json").read_text()) == ["bad", "good"]
    losses = [h["val/loss"] for h in results["history"]]
    assert [h["step"] for h in results["history"]] == [10, 20, 30, 40]
    assert results["metrics"]["val/acc"] == 1.0, results["history"]
    assert losses[-1] < 0.25 * math.log(2) and losses[-1] < 0.6 * losses[0], losses


# --------------------------------------------------------------------------- data=hf, mistakes


def test_a_missing_column_names_the_key_and_the_columns(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "d.jsonl", [{"text": "a", "label": "x"}])
    options = dict(path="json", data_files=str(data_file), val_split="train")
    with pytest.raises(
        UserError, match=r"data.text_field='body' is not a column .* columns: \['text', 'label'\]"
    ):
        _hf(tmp_path, kind="text", text_field="body", **options).split_text()
    with pytest.raises(UserError, match=r"data.target_field='en' is not a column"):
        _hf(tmp_path, kind="pairs", source_field="text", target_field="en", **options).pairs()
    with pytest.raises(UserError, match=r"data.label_field='stars' is not a column"):
        _hf(tmp_path, kind="labelled", label_field="stars", **options).examples()


def test_a_missing_split_names_the_key_and_the_splits(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "d.jsonl", [{"text": "a"}])
    data = _hf(tmp_path, kind="text", path="json", data_files=str(data_file))
    with pytest.raises(
        UserError,
        match=r"data.val_split='validation' is not a split .* its splits: \['train'\] "
        r"\(or data.val_split=null data.val_fraction=0.1\)",
    ):
        data.split_text()
    data = _hf(tmp_path, kind="text", path="json", data_files=str(data_file), train_split="tr")
    with pytest.raises(UserError, match=r"data.train_split='tr' is not a split"):
        data.split_text()


def test_bad_settings_and_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"data.kind='tokens' is not valid: .*'text', 'labelled'"):
        _hf(tmp_path, kind="tokens", path="json")
    with pytest.raises(UserError, match="give exactly one"):
        _hf(tmp_path, kind="text", path="json", val_split="validation", val_fraction=0.1)
    with pytest.raises(UserError, match="data.path is not set"):
        _hf(tmp_path, kind="text", path="")
    missing = _hf(tmp_path, kind="text", path="json", data_files=str(tmp_path / "nope.jsonl"))
    with pytest.raises(UserError, match=r"data.path='json' .* could not be loaded"):
        missing.split_text()
    empty_cell = _jsonl(tmp_path / "d.jsonl", [{"de": "eins", "en": ""}])
    pairs = _hf(
        tmp_path,
        kind="pairs",
        path="json",
        data_files=str(empty_cell),
        val_split="train",
        source_field="de",
        target_field="en",
    )
    with pytest.raises(UserError, match=r"json:train \(row 0\): 'en' is empty"):
        pairs.pairs()


def test_without_datasets_installed_the_message_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now fails
    data = _hf(tmp_path, kind="text", path="json", data_files="x.jsonl")
    with pytest.raises(UserError, match=r"pip install 'xfmr\[hf\]'"):
        data.split_text()


def test_config_checks_take_the_kind_from_data_kind_without_importing_datasets(
    tmp_path: Path,
) -> None:
    """objective=seq2seq needs pairs: data=hf with data.kind=text is refused by name, before
    `datasets` (or torch) is imported; data.kind=pairs passes."""
    probe = (
        "import sys\n"
        "sys.argv = ['xfmr-train', 'objective=seq2seq', 'arch=encoder_decoder', 'data=hf',\n"
        "            'data.path=json', 'data.kind=text']\n"
        "from xfmr.cli.train import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'datasets', 'torch'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "data.kind=pairs" in done.stderr and "trains on pairs" in done.stderr, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    base = ["objective=seq2seq", "arch=encoder_decoder", "data=hf", "data.path=json"]
    compose_config(tmp_path, [*base, "data.kind=pairs"])
    with pytest.raises(UserError, match=r"data.kind='rows' is not valid"):
        compose_config(tmp_path, [*base, "data.kind=rows"])
    # kind=text under learned positions as short as its blocks: pairs' max_length is not in play
    text = ["data=hf", "data.path=json", "pos=learned", "model.pos.max_positions=16"]
    compose_config(tmp_path, [*text, "data.block_size=16"])


# --------------------------------------------------------------------------- data=parallel, JSONL


def _parallel_jsonl(tmp_path: Path) -> dict[str, Path]:
    rows = [{"de": f"ein hund {i}", "en": f"a dog {i}"} for i in range(12)]
    return {
        "train_path": _jsonl(tmp_path / "train.jsonl", rows[:10]),
        "val_path": _jsonl(tmp_path / "val.jsonl", rows[10:]),
    }


def test_parallel_reads_jsonl_with_named_fields(tmp_path: Path) -> None:
    files = {k: str(v) for k, v in _parallel_jsonl(tmp_path).items()}
    data = ParallelDataModule(**files, source_field="de", target_field="en")
    train, val = data.pairs()
    assert train[0] == ("ein hund 0", "a dog 0") and len(train) == 10
    assert val == [("ein hund 10", "a dog 10"), ("ein hund 11", "a dog 11")]
    with pytest.raises(UserError, match=r"train.jsonl:1: missing field 'source'"):
        ParallelDataModule(**files).pairs()  # the default fields are source/target


def test_parallel_takes_exactly_one_of_the_two_ways(tmp_path: Path) -> None:
    jsonl = {k: str(v) for k, v in _parallel_jsonl(tmp_path).items()}
    aligned = {"train_source": "a", "train_target": "b", "val_source": "c", "val_target": "d"}
    for given in ({}, {**aligned, **jsonl}, {"train_source": "a"}, {"train_path": "a"}):
        with pytest.raises(UserError, match="data=parallel takes exactly one of") as error:
            ParallelDataModule(**given).pairs()
        assert str(error.value).endswith(f"set: {list(given)}")


def test_parallel_jsonl_trains_seq2seq_end_to_end(tmp_path: Path) -> None:
    """The run's tokenizer holds exactly the characters of the "de" and "en" fields (plus the
    newline joining lines, and the specials), so the run read those fields and no JSON around
    them; and the model learns the pairs: the validation loss falls below 0.6 of the first
    one and below half of ln(V), where an untrained model starts."""
    from xfmr.training.run import run_training

    files = _parallel_jsonl(tmp_path)
    cfg = compose_config(
        tmp_path,
        [
            "data=parallel",
            *(f"data.{key}={path}" for key, path in files.items()),
            "data.source_field=de",
            "data.target_field=en",
            "objective=seq2seq",
            "arch=encoder_decoder",
            "size=tiny",
            "optim.lr=3e-3",
            "trainer.max_steps=40",
            "trainer.val_check_interval=5",
        ],
    )
    results = run_training(cfg)
    vocab = json.loads((tmp_path / "run" / "tokenizer.json").read_text())["model"]["vocab"]
    rows = [json.loads(line) for line in files["train_path"].read_text().splitlines()]
    specials = {"<unk>", "<pad>", "<s>", "</s>"}
    assert set(vocab) - specials == {"\n", *"".join(row["de"] + row["en"] for row in rows)}
    losses = [h["val/loss"] for h in results["history"]]
    assert len(losses) == 8
    assert losses[-1] < 0.6 * losses[0] and losses[-1] < 0.5 * math.log(len(vocab)), losses
