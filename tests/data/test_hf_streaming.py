"""`data=hf data.streaming=true` (local JSON and parquet files, offline): rows are read as batches
need them, shuffled by the stream's buffer, and become the examples the in-memory path gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.config import compose_config
from xfmr.data.hf import hf_datamodule
from xfmr.data.hf_stream import LABEL_SCAN_ROWS, HFStreamingDataModule, pack_windows
from xfmr.errors import UserError
from xfmr.objectives.clm import CausalLMObjective
from xfmr.text.sample import survey, training_text
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = "amber birch cedar dune ember fjord grove heath inlet juniper kestrel lichen".split()
# Rows of different lengths, none alike, none with a newline in it.
ROWS = [
    " ".join(WORDS[(i + k) % len(WORDS)] for k in range(3 + i % 5)) + f" {i}" for i in range(40)
]


@pytest.fixture(autouse=True)
def offline_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the hub, and nothing is cached outside tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _stream(tmp_path: Path, **kwargs) -> HFStreamingDataModule:
    data = hf_datamodule(cache_dir=str(tmp_path / "hf_cache"), streaming=True, **kwargs)
    assert isinstance(data, HFStreamingDataModule)
    return data


def _char_tokenizer(data):
    return train_tokenizer(TokenizerSpec(kind="char"), training_text(data, 10**9))


def _unpack(windows) -> list[int]:
    """The token stream that windows overlapping by one token were cut from."""
    ids = list(windows[0])
    for window in windows[1:]:
        ids.extend(window[1:])
    return ids


# --------------------------------------------------------------------------- kind=text


def test_streamed_text_trains_end_to_end_across_epochs(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": row} for row in ROWS])
    cfg = compose_config(
        tmp_path,
        [
            "data=hf",
            "data.path=json",
            f"data.data_files={data_file}",
            f"data.cache_dir={tmp_path / 'hf_cache'}",
            "data.streaming=true",
            "data.val_split=null",
            "data.val_rows=8",
            "data.block_size=16",
            "data.shuffle_buffer=16",
            "size=tiny",
            "trainer.max_steps=30",  # ~1000 training tokens: 15 batches of 4 windows an epoch
            "trainer.val_check_interval=10",
        ],
    )
    results = run_training(cfg)
    assert results["step"] == 30
    assert math.isfinite(results["metrics"]["val/loss"])
    assert (tmp_path / "run" / "tokenizer.json").is_file()


def test_streamed_windows_hold_exactly_the_rows_tokens(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": row} for row in ROWS])
    data = _stream(
        tmp_path,
        kind="text",
        path="json",
        data_files=str(data_file),
        val_split="train",
        block_size=8,
        batch_size=3,
        shuffle_buffer=100,
    )
    tokenizer = _char_tokenizer(data)
    data.attach(tokenizer, CausalLMObjective().collate)
    # Validation: the rows in order, joined by newlines, cut into windows of 9 tokens.
    batches = list(data.val_dataloader())
    windows = [w for b in batches for w in _windows(b)]
    text = "\n".join(ROWS)
    assert all(len(w) == 9 for w in windows)
    assert tokenizer.decode(_unpack(windows)) == text[: 8 * len(windows) + 1]
    assert 0 <= len(text) - (8 * len(windows) + 1) < 8  # less than a window is left over
    # Training: the same rows, each whole once an epoch, in a shuffled order that each epoch
    # changes.
    orders = []
    loader = data.train_dataloader()  # built once per run, iterated once per epoch
    for steps in (loader, loader, data.train_dataloader()):
        windows = [w for (b,) in steps for w in _windows(b)]  # a batch a step
        lines = tokenizer.decode(_unpack(windows)).split("\n")[:-1]  # the last may be cut
        assert sorted(lines) == sorted(set(lines)) and set(lines) <= set(ROWS)
        assert len(lines) > len(ROWS) - 8
        orders.append(lines)
    assert orders[0] != ROWS[: len(orders[0])]
    assert orders[0] != orders[1]  # the next epoch reshuffles
    assert orders[0] == orders[2]  # the same seed, the same first epoch


def _windows(batch) -> list[list[int]]:
    """The windows of a causal LM batch: inputs and the last target."""
    return [
        x.tolist() + [y[-1].item()]
        for x, y in zip(batch["input_ids"], batch["labels"], strict=True)
    ]


def test_the_tokenizer_sample_is_the_head_of_the_unshuffled_stream(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": row} for row in ROWS])
    data = _stream(tmp_path, kind="text", path="json", data_files=str(data_file), val_split="train")
    assert "".join(training_text(data, 50)) == "\n".join(ROWS)[:50]
    assert not survey(data, 50).whole
    assert "".join(training_text(data, 10**6)) == "\n".join(ROWS)
    assert survey(data, 10**6).whole


def test_pack_windows_overlap_by_one_token_and_drop_the_rest() -> None:
    rows = [[1, 2, 3], [4], [5, 6, 7]]
    windows = [w.tolist() for w in pack_windows(rows, length=4, separator=[0])]
    assert windows == [[1, 2, 3, 0], [0, 4, 0, 5]]  # then 5 6 7: one short of a third window
    rows[-1].append(8)
    windows = [w.tolist() for w in pack_windows(rows, length=4, separator=[0])]
    assert windows[-1] == [5, 6, 7, 8]


# --------------------------------------------------------------------------- labelled, pairs


def _labelled_rows(n: int) -> list[dict]:
    return [
        {"text": ROWS[i % len(ROWS)], "label": ["pos", "neg", "mixed"][i % 3], "other": i}
        for i in range(n)
    ]


def test_labelled_streaming_gives_the_in_memory_examples(tmp_path: Path) -> None:
    train = _jsonl(tmp_path / "train.jsonl", _labelled_rows(30))
    val = _jsonl(tmp_path / "val.jsonl", _labelled_rows(7))
    files = {"train": str(train), "validation": str(val)}
    options = {"kind": "labelled", "path": "json", "data_files": files, "text_field": "text"}
    in_memory = hf_datamodule(cache_dir=str(tmp_path / "hf_cache"), **options)
    streamed = _stream(tmp_path, **options, batch_size=4)
    tokenizer = _char_tokenizer(streamed)
    assert streamed.label_names() == in_memory.label_names() == ["mixed", "neg", "pos"]
    in_memory.attach(tokenizer, list)
    streamed.attach(tokenizer, list)

    def key(example):
        ids, pair, label = example
        return tuple(ids), pair, label

    train_examples = [e for (batch,) in streamed.train_dataloader() for e in batch]
    # Batches of 4: the last 2 of 30 rows are dropped, as the in-memory loader drops them.
    assert len(train_examples) == 28
    assert set(map(key, train_examples)) <= set(map(key, in_memory.train_set))
    assert [key(e) for e in train_examples] != [key(e) for e in in_memory.train_set[:28]]
    val_examples = [e for batch in streamed.val_dataloader() for e in batch]
    assert [key(e) for e in val_examples] == [key(e) for e in in_memory.val_set]


def test_class_label_columns_keep_their_names_and_order(tmp_path: Path) -> None:
    import datasets

    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["pos", "neg"])}
    )
    rows = {"text": ROWS[:10], "label": [i % 2 for i in range(10)]}
    path = tmp_path / "rows.parquet"
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(path))
    data = _stream(
        tmp_path,
        kind="labelled",
        path="parquet",
        data_files=str(path),
        text_field="text",
        val_split="train",
    )
    assert data.label_names() == ["pos", "neg"]
    data.attach(_char_tokenizer(data), list)
    labels = [label for batch in data.val_dataloader() for _, _, label in batch]
    assert labels == rows["label"]


def test_a_label_past_the_scanned_rows_names_the_scan_and_the_fix(tmp_path: Path) -> None:
    rows = [{"text": "fine", "label": "yes"}] * LABEL_SCAN_ROWS + [
        {"text": "odd", "label": "maybe"}
    ]
    data_file = _jsonl(tmp_path / "rows.jsonl", rows)
    data = _stream(
        tmp_path,
        kind="labelled",
        path="json",
        data_files=str(data_file),
        text_field="text",
        val_split="train",
        batch_size=1000,
    )
    assert data.label_names() == ["yes"]
    data.attach(_char_tokenizer(data), list)
    with pytest.raises(UserError, match=r"'maybe'.*first 10000 training rows.*data.labels"):
        for _ in data.val_dataloader():
            pass


def test_streamed_pairs_are_one_example_per_row(tmp_path: Path) -> None:
    rows = [{"source": row, "target": row[::-1]} for row in ROWS[:12]]
    data_file = _jsonl(tmp_path / "pairs.jsonl", rows)
    data = _stream(
        tmp_path,
        kind="pairs",
        path="json",
        data_files=str(data_file),
        val_split=None,
        val_rows=5,
        max_length=6,
    )
    tokenizer = _char_tokenizer(data)
    assert "".join(training_text(data, 10**6)).startswith(f"{ROWS[5]}\n{ROWS[5][::-1]}\n{ROWS[6]}")
    data.attach(tokenizer, list)
    val = [pair for batch in data.val_dataloader() for pair in batch]
    assert val == [
        (tokenizer.encode(r["source"])[:6], tokenizer.encode(r["target"])[:6]) for r in rows[:5]
    ]


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"val_split": None, "val_fraction": 0.1},
            r"data.val_fraction=0.1 needs the whole split in memory; with data.streaming=true give data.val_rows=N",
        ),
        ({"val_split": "validation", "val_rows": 10}, r"give exactly one"),
        ({"val_split": None}, r"give exactly one"),
        ({"val_split": None, "val_rows": 0}, r"data.val_rows=0 must be a positive number of rows"),
        ({"train_stride": 4}, r"data.train_stride=4 needs the whole text in memory"),
        ({"shuffle_buffer": 0}, r"data.shuffle_buffer=0 must be a positive integer"),
    ],
)
def test_what_streaming_cannot_do_is_refused_in_one_line(tmp_path: Path, options, message) -> None:
    with pytest.raises(UserError, match=message) as refused:
        _stream(tmp_path, kind="text", path="json", data_files="rows.jsonl", **options)
    assert "\n" not in str(refused.value)


def test_val_rows_without_streaming_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"data.val_rows=10 is for data.streaming=true") as refused:
        hf_datamodule(kind="text", path="json", val_split=None, val_rows=10)
    assert "\n" not in str(refused.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "rows.jsonl", [{"body": row} for row in ROWS])
    data = _stream(tmp_path, kind="text", path="json", data_files=str(data_file), val_split="train")
    with pytest.raises(
        UserError,
        match=r"data.text_field='text' is not a column of json:train; its columns: \['body'\]",
    ):
        survey(data, 1000)


def test_a_stream_too_short_for_one_window_says_what_to_change(tmp_path: Path) -> None:
    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": "short"}, {"text": "rows"}])
    data = _stream(
        tmp_path,
        kind="text",
        path="json",
        data_files=str(data_file),
        val_split="train",
        block_size=32,
    )
    data.attach(_char_tokenizer(data), CausalLMObjective().collate)
    with pytest.raises(UserError, match=r"fewer than data.block_size \+ 1 = 33 tokens"):
        next(iter(data.val_dataloader()))


def test_the_cli_refuses_val_fraction_with_streaming_in_one_line(tmp_path: Path) -> None:
    from helpers.cli import run_cli

    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": row} for row in ROWS])
    offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = run_cli(
        [
            "data=hf",
            "data.path=json",
            f"data.data_files={data_file}",
            "data.streaming=true",
            "data.val_split=null",
            "data.val_fraction=0.1",
            "size=tiny",
            "logger=none",
            "print_config=false",
        ],
        tmp_path,
        env=offline,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.output
    errors = [line for line in done.output.splitlines() if "error" in line]
    assert errors == [
        "xfmr-train: error: data.val_fraction=0.1 needs the whole split in memory; with "
        "data.streaming=true give data.val_rows=N (the first N rows of data.train_split "
        "validate) or data.val_split=NAME"
    ]


@pytest.mark.slow  # two processes start torch and lightning: about a minute on two busy cores
def test_ddp_processes_stream_their_shares_past_the_end_of_a_pass(tmp_path: Path) -> None:
    """Each of two processes reads half of 30 training rows (~8 batches a pass): 24 steps run
    every share out twice and end at trainer.max_steps, no process left waiting for the other."""
    from helpers.cli import run_cli
    from helpers.runs import read_results

    data_file = _jsonl(tmp_path / "rows.jsonl", [{"text": row} for row in ROWS])
    offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    run_dir = tmp_path / "run"
    done = run_cli(
        [
            "data=hf",
            "data.path=json",
            f"data.data_files={data_file}",
            "data.streaming=true",
            "data.val_split=null",
            "data.val_rows=10",
            "data.block_size=16",
            "data.batch_size=4",
            "size=tiny",
            "logger=none",
            "print_config=false",
            "callbacks.progress_bar=null",
            "trainer=ddp",
            "trainer.accelerator=cpu",
            "trainer.max_steps=24",
            "schedule.warmup_steps=2",
            "trainer.val_check_interval=12",
            "trainer.limit_val_batches=2",
            "trainer.num_sanity_val_steps=0",
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
        env=offline,
        timeout=600,
    )
    assert done.returncode == 0, done.output
    results = read_results(run_dir)
    assert (results["status"], results["world_size"], results["step"]) == ("completed", 2, 24)
    assert math.isfinite(results["metrics"]["val/loss"])
