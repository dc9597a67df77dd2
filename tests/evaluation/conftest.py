"""Tiny decoder runs of the two HF families xfmr exports (GPT-2, Llama), trained two steps in
process and exported with `xfmr-export format=hf`'s code once per session; and a tiny
multiple-choice lm-eval task over rows the test writes (`dataset_path: json`). Nothing is
downloaded."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from helpers.config import compose_config

pytest.importorskip("lm_eval")
# transformers' progress bars (its export's "Writing model shards") write from the test that
# exports into whichever test's captured stderr comes next on the same worker.
pytest.importorskip("transformers").utils.logging.disable_progress_bar()
for _variable in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
    os.environ.setdefault(_variable, "1")

FAMILIES = {
    "gpt2": ["size=tiny", "model.activation=gelu_tanh"],
    "llama": [
        "size=tiny",
        "pos=rotary",
        "model.norm=rmsnorm",
        "model.activation=swiglu",
        "model.bias=false",
        "model.tie_embeddings=false",
    ],
}
CHOICE_TASK = "xfmr_tiny_choice"
# Questions in CORPUS's words (tests/helpers/runs.py), so the char tokenizer knows each letter;
# lm-eval puts a space between question and answer. Answers fit block_size=16.
QUESTIONS = [
    ("the quick brown fox jumps over the", ["lazy dog.", "quiet moon.", "river."], 0),
    ("a small cat sees a big bird near", ["the river.", "the moon."], 0),
    ("two owls watch the quiet", ["moon.", "dog at night.", "fox at night."], 0),
    ("the lazy", ["dog.", "birds", "owls."], 0),
    ("a big bird near the", ["river.", "quick fox.", "cat"], 0),
    ("two owls", ["sees a cat.", "watch the moon."], 1),
]


def _paired(run_dir: Path, folder: Path, *, batch_size: int):
    """XfmrLM over the run and lm-eval's HFLM over its export, HFLM given XfmrLM's length and
    prefix token so both cut and begin requests alike."""
    from lm_eval.models.huggingface import HFLM

    from xfmr.evaluation.lm_model import XfmrLM
    from xfmr.runs.loading import load_run

    ours = XfmrLM(load_run(run_dir), batch_size=batch_size)
    theirs = HFLM(
        pretrained=str(folder),
        device="cpu",
        batch_size=batch_size,
        dtype="float32",
        max_length=ours.max_length,
        prefix_token_id=ours.prefix_token_id,
    )
    return ours, theirs


@pytest.fixture(scope="session")
def paired_models():
    """`_paired`: (XfmrLM over a run, HFLM over its export)."""
    return _paired


@pytest.fixture(scope="session")
def decoders(tmp_path_factory):
    """family -> (run directory, HF folder), each trained and exported on first use."""
    from xfmr.runs.export_hf import export_hf
    from xfmr.training.run import run_training

    done: dict[str, tuple[Path, Path]] = {}

    def get(family: str) -> tuple[Path, Path]:
        if family not in done:
            root = tmp_path_factory.mktemp(family)
            overrides = [*FAMILIES[family], "trainer.enable_model_summary=false"]
            run_training(compose_config(root, overrides))
            export_hf(root / "run", root / "hf")
            done[family] = (root / "run", root / "hf")
        return done[family]

    return get


# A play in the toy language's sentences (xfmr.data.synthetic), whose letters the minimal pairs
# use, with speakers' names and blank lines between speeches: its validation tail (PLAY_VAL)
# gives xfmr_next_line its questions. Its longest next_line request (3 lines of context and an
# ending) is 188 characters and the minimal pairs' longest sentence 79; PLAY_BLOCK covers both.
SPEAKERS = ["ROMEO", "JULIET", "FRIAR", "NURSE", "MERCUTIO", "TYBALT"]
PLAY_BLOCK, PLAY_VAL = 256, 0.2


def play(speeches: int = 200, seed: int = 0) -> str:
    from xfmr.data.synthetic import sentence

    rng = random.Random(seed)
    return "".join(
        f"{SPEAKERS[k % len(SPEAKERS)]}:\n"
        + "\n".join(sentence(rng) for _ in range(rng.randint(1, 3)))
        + "\n\n"
        for k in range(speeches)
    )


@pytest.fixture(scope="session")
def play_decoders(tmp_path_factory):
    """family -> (run directory, HF folder) as `decoders`, trained on `play()` with
    block_size=PLAY_BLOCK: every request of the shipped multiple-choice tasks fits whole."""
    from xfmr.runs.export_hf import export_hf
    from xfmr.training.run import run_training

    done: dict[str, tuple[Path, Path]] = {}

    def get(family: str) -> tuple[Path, Path]:
        if family not in done:
            root = tmp_path_factory.mktemp(f"play_{family}")
            (root / "play.txt").write_text(play(), encoding="utf-8")
            overrides = [
                *FAMILIES[family],
                f"data.path={root / 'play.txt'}",
                f"data.block_size={PLAY_BLOCK}",
                f"data.val_fraction={PLAY_VAL}",
                "trainer.enable_model_summary=false",
            ]
            run_training(compose_config(root, overrides))
            export_hf(root / "run", root / "hf")
            done[family] = (root / "run", root / "hf")
        return done[family]

    return get


@pytest.fixture
def questions() -> list[tuple[str, list[str], int]]:
    """CHOICE_TASK's rows: (question, answers, the right one's index)."""
    return QUESTIONS


@pytest.fixture
def choice_task(tmp_path):
    """write(folder=tmp_path/"tasks", chance=None) -> the folder, with CHOICE_TASK's YAML and
    rows (and `metadata.chance` when given)."""

    def write(folder: Path | None = None, *, chance: float | None = None) -> Path:
        return write_choice_task(folder or tmp_path / "tasks", chance=chance)

    return write


def write_choice_task(folder: Path, *, chance: float | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = folder / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"context": c, "choices": choices, "answer": a}) + "\n"
            for c, choices, a in QUESTIONS
        )
    )
    lines = [
        f"task: {CHOICE_TASK}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {rows}",
        "test_split: test",
        "output_type: multiple_choice",
        'doc_to_text: "{{context}}"',
        'doc_to_choice: "{{choices}}"',
        'doc_to_target: "{{answer}}"',
        "metric_list:",
        *(
            line
            for metric in ("acc", "acc_norm")
            for line in (
                f"  - metric: {metric}",
                "    aggregation: mean",
                "    higher_is_better: true",
            )
        ),
    ]
    if chance is not None:
        lines += ["metadata:", "  version: 1.0", f"  chance: {chance}"]
    (folder / f"{CHOICE_TASK}.yaml").write_text("\n".join(lines) + "\n")
    return folder
