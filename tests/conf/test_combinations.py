"""Every arch x pos x objective through the real config composition: each valid one passes the
check, and every pair that can break trains two steps; every invalid one is refused before
training with the keys and the valid choices."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from helpers.config import checked
from helpers.runs import PEAK
from xfmr.errors import UserError
from xfmr.nn.config import ARCH_POSITIONS
from xfmr.objectives.registry import objectives
from xfmr.paths import config_dir


def _choices(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def _objective_archs(choice: str) -> tuple[str, ...]:
    return objectives()[choice].archs


COMBINATIONS = list(itertools.product(_choices("arch"), _choices("pos"), _choices("objective")))
VALID = [c for c in COMBINATIONS if c[1] in ARCH_POSITIONS[c[0]] and c[0] in _objective_archs(c[2])]
INVALID = [c for c in COMBINATIONS if c not in VALID]


def _covering(combinations: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Few combinations that hold every (arch, pos) and every (arch, objective) pair of
    `combinations`: a scheme is wired into the architecture's stack (nn tests cover each
    scheme's maths), an objective's collator and head into the architecture's model, and
    neither reaches the other. Greedy: the next pick covers the most pairs still missing."""

    def pairs(combination: tuple[str, str, str]) -> set[tuple[str, str, str]]:
        arch, pos, objective = combination
        return {("pos", arch, pos), ("objective", arch, objective)}

    missing = set().union(*(pairs(c) for c in combinations))
    chosen = []
    while missing:
        best = max(combinations, key=lambda c: (len(pairs(c) & missing), c))
        chosen.append(best)
        missing -= pairs(best)
    return sorted(chosen)


TRAINED = _covering(VALID)


def _compose(tmp_path: Path, overrides: list[str]):
    GlobalHydra.instance().clear()
    paths = [f"paths.root_dir={tmp_path}", f"paths.output_dir={tmp_path / 'run'}"]
    objective = next(o.split("=", 1)[1] for o in overrides if o.startswith("objective="))
    kind = objectives()[objective].reads
    if kind == "pairs":
        data = ["data=synthetic_translation", "data.n_pairs=60", "data.max_length=12"]
    elif kind == "labelled":
        tsv = tmp_path / "labelled.tsv"
        tsv.write_text("sentence\tlabel\n" + "a fine film\t1\nawful and dull\t0\n" * 4)
        data = ["data=delimited", f"data.train_path={tsv}", f"data.val_path={tsv}"]
    elif kind == "tagged":
        conll = tmp_path / "tagged.txt"
        conll.write_text(
            "EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n\n" * 4
        )
        data = ["data=conll", f"data.train_path={conll}", f"data.val_path={conll}"]
    elif kind == "questions":
        context = "the tower was built in 1889 in paris ."
        question = {
            "id": "q",
            "question": "when was it built ?",
            "answers": [{"text": "1889", "answer_start": 23}],
        }
        squad = tmp_path / "squad.json"
        squad.write_text(
            json.dumps({"data": [{"paragraphs": [{"context": context, "qas": [question]}]}]})
        )
        data = [
            "data=squad",
            f"data.train_path={squad}",
            f"data.val_path={squad}",
            "data.max_length=16",
            "data.max_query_length=6",
            "tokenizer=wordpiece",
            "tokenizer.vocab_size=60",
        ]
    elif kind == "documents":
        documents = tmp_path / "documents.txt"
        document = "the cat sat on the mat .\nit was warm there .\nthen it slept .\n"
        documents.write_text("\n".join([document] * 12))
        data = ["data=documents", f"data.path={documents}", "objective.max_length=16"]
    else:
        data = ["data.n_sentences=300", "data.block_size=16"]
    tiny = [
        "size=tiny",
        *data,
        "data.batch_size=4",
        "trainer.max_steps=2",
        "schedule.warmup_steps=1",
        "trainer.val_check_interval=2",
        PEAK,
        "trainer.limit_val_batches=1",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_model_summary=false",
        "trainer.enable_progress_bar=false",
        "callbacks.progress_bar=null",
        "callbacks.text_sample.max_new_tokens=4",
        "logger=none",
    ]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="train", overrides=[*overrides, *tiny, *paths])


def test_there_are_valid_and_invalid_combinations() -> None:
    assert ("decoder", "rotary", "clm") in VALID and ("rnn", "none", "clm") in VALID
    assert ("encoder", "learned", "clm") in INVALID and ("rnn", "relative", "clm") in INVALID
    archs = {arch for arch, _, _ in VALID}
    assert {(a, p) for a, p, _ in TRAINED} == {(a, p) for a, p, _ in VALID}
    assert {(a, o) for a, _, o in TRAINED} == {(a, o) for a, _, o in VALID}
    assert len(TRAINED) < len(VALID) and archs == {"decoder", "encoder", "encoder_decoder", "rnn"}


@pytest.mark.parametrize(("arch", "pos", "objective"), VALID)
def test_valid_combination_passes_the_check(
    tmp_path: Path, arch: str, pos: str, objective: str
) -> None:
    config = checked(_compose(tmp_path, [f"arch={arch}", f"pos={pos}", f"objective={objective}"]))
    assert (config.model.arch, config.model.pos.name) == (arch, pos), "the choices are checked"


@pytest.mark.parametrize(("arch", "pos", "objective"), TRAINED)
def test_valid_combination_trains_two_steps(
    tmp_path: Path, arch: str, pos: str, objective: str
) -> None:
    from xfmr.training.run import run_training

    config = checked(_compose(tmp_path, [f"arch={arch}", f"pos={pos}", f"objective={objective}"]))
    results = run_training(config)
    assert results["step"] == 2
    assert math.isfinite(results["metrics"]["val/loss"])
    assert (tmp_path / "run" / "tokenizer.json").is_file()
    checkpoint = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    built = checkpoint["hyper_parameters"]["model_config"]
    assert (built["arch"], built["pos"]["name"]) == (arch, pos), "the composed choices were built"


@pytest.mark.parametrize(("arch", "pos", "objective"), INVALID)
def test_invalid_combination_is_refused_by_name(
    tmp_path: Path, arch: str, pos: str, objective: str
) -> None:
    cfg = _compose(tmp_path, [f"arch={arch}", f"pos={pos}", f"objective={objective}"])
    with pytest.raises(UserError) as refused:
        checked(cfg)
    message = str(refused.value)
    assert f"arch={arch}" in message or f"arch='{arch}'" in message
    assert "[" in message, "the message lists what would be valid"
