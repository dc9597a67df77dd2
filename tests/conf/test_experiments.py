"""Every shipped experiment (conf/experiment/*.yaml) trains for 2 steps on tiny data of its own
shape, with its own groups (architecture, objective, data, tokenizer), shrunk to size=tiny."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.runs import CORPUS
from xfmr.paths import config_dir

EXPERIMENT_DIR = config_dir() / "experiment"


# --------------------------------------------------------------------------- tiny data per data group
# Each writer puts files of the data group's shape under `root` and returns the overrides that
# point the experiment at them.


def _text(root: Path) -> list[str]:
    (root / "corpus.txt").write_text(CORPUS)
    return [f"data.path={root / 'corpus.txt'}", "data.block_size=16"]


def _parallel(root: Path) -> list[str]:
    words = [("katze", "cat"), ("hund", "dog"), ("vogel", "bird"), ("pferd", "horse")]
    pairs = [
        (f"eine {de} sieht {n} steine .", f"a {en} sees {n} stones .")
        for n in range(12)
        for de, en in words
    ]
    overrides = []
    for split, rows in (("train", pairs[:40]), ("val", pairs[40:])):
        for side, index, suffix in (("source", 0, "de"), ("target", 1, "en")):
            path = root / f"{split}.{suffix}"
            path.write_text("".join(row[index] + "\n" for row in rows))
            overrides.append(f"data.{split}_{side}={path}")
    return [*overrides, "data.max_length=16"]


def _delimited(root: Path) -> list[str]:
    good = ["a fine warm film", "truly a delight", "warm and clever"]
    bad = ["a dull cold film", "truly a bore", "cold and clumsy"]
    rows = [(text, "1") for text in good] + [(text, "0") for text in bad]
    for name, repeat in (("train", 6), ("dev", 2)):
        body = "".join(f"{text}\t{label}\n" for text, label in rows * repeat)
        (root / f"{name}.tsv").write_text("sentence\tlabel\n" + body)
    return [f"data.train_path={root / 'train.tsv'}", f"data.val_path={root / 'dev.tsv'}"]


def _conll(root: Path) -> list[str]:
    sentence = [
        ("EU", "NNP", "B-ORG"),
        ("rejects", "VBZ", "O"),
        ("German", "JJ", "B-MISC"),
        ("call", "NN", "O"),
        ("from", "IN", "O"),
        ("Peter", "NNP", "B-PER"),
        ("Blackburn", "NNP", "I-PER"),
        (".", ".", "O"),
    ]
    block = "".join(f"{token} {pos} {tag}\n" for token, pos, tag in sentence) + "\n"
    (root / "train.txt").write_text("-DOCSTART- -X- O\n\n" + block * 12)
    (root / "dev.txt").write_text(block * 4)
    return [f"data.train_path={root / 'train.txt'}", f"data.val_path={root / 'dev.txt'}"]


def _squad(root: Path) -> list[str]:
    context = "The cat sat on the mat in Paris. The dog slept under the old oak tree."
    questions = [
        ("Where did the cat sit?", "on the mat"),
        ("Which city is it in?", "Paris"),
        ("Where did the dog sleep?", "under the old oak tree"),
    ]
    for name, repeat in (("train", 4), ("dev", 1)):
        qas = [
            {
                "id": f"{name}-{i}-{j}",
                "question": question,
                "answers": [{"text": answer, "answer_start": context.index(answer)}],
            }
            for i in range(repeat)
            for j, (question, answer) in enumerate(questions)
        ]
        document = {
            "version": "1.1",
            "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}],
        }
        (root / f"{name}.json").write_text(json.dumps(document))
    return [f"data.train_path={root / 'train.json'}", f"data.val_path={root / 'dev.json'}"]


def _documents(root: Path) -> list[str]:
    lines = CORPUS.splitlines()
    documents = ["\n".join(lines[i : i + 4]) for i in range(0, 80, 4)]  # 20 documents
    (root / "documents.txt").write_text("\n\n".join(documents) + "\n")
    return [f"data.path={root / 'documents.txt'}", "objective.max_length=32"]


def _synthetic(root: Path) -> list[str]:
    return ["data.n_sentences=200", "data.block_size=16"]


TINY_DATA: dict[str, Callable[[Path], list[str]]] = {
    "text": _text,
    "parallel": _parallel,
    "delimited": _delimited,
    "conll": _conll,
    "squad": _squad,
    "documents": _documents,
    "synthetic": _synthetic,
}


# --------------------------------------------------------------------------- what each run must show


@dataclass(frozen=True)
class Expected:
    """What a 2-step run of an experiment must show: its objective (by class), metrics beyond
    val/loss, and model settings in the config the run saved."""

    objective: str
    metrics: tuple[str, ...]
    model: dict[str, object]
    pos: str | None = None
    overrides: tuple[str, ...] = ()
    needs_run: str | None = None  # the experiment whose run this one starts from (init_from)


EXPERIMENTS: dict[str, Expected] = {
    "nanogpt_shakespeare_char": Expected(
        "CausalLMObjective", ("val/ppl",), {"arch": "decoder", "bias": False}, pos="learned"
    ),
    "gpt_finetune": Expected(
        "CausalLMObjective",
        ("val/ppl",),
        {"arch": "decoder", "bias": False},
        pos="learned",
        needs_run="nanogpt_shakespeare_char",
    ),
    "bert_mlm": Expected("MaskedLMObjective", ("val/ppl",), {"arch": "encoder"}, pos="learned"),
    "bert_sst2": Expected("ClassificationObjective", ("val/acc",), {"arch": "encoder"}),
    "bert_pretrain": Expected(
        "MaskedLMNextSentenceObjective", ("val/nsp_acc", "val/mlm_ppl"), {"arch": "encoder"}
    ),
    "bert_conll": Expected("TaggingObjective", ("val/f1",), {"arch": "encoder"}),
    "bert_squad": Expected("QuestionAnsweringObjective", ("val/em", "val/f1"), {"arch": "encoder"}),
    "transformer_multi30k": Expected(
        "Seq2SeqObjective",
        ("val/ppl",),
        {"arch": "encoder_decoder", "placement": "post", "embed_scale": True},
        pos="sinusoidal",
    ),
    "t5_span": Expected(
        "SpanCorruptionObjective",
        ("val/ppl",),
        {
            "arch": "encoder_decoder",
            "norm": "rmsnorm",
            "placement": "pre",
            "bias": False,
            "attn_scale": False,
            "scale_logits": True,
        },
        pos="relative",
    ),
    # The Llama line (tests/interop/test_families.py holds each to its transformers class).
    "llama3": Expected(
        "CausalLMObjective",
        ("val/ppl",),
        {"n_kv_heads": 2, "activation": "swiglu", "tie_embeddings": False},
        pos="rotary",
    ),
    "mistral": Expected("CausalLMObjective", ("val/ppl",), {"window": 32}, pos="rotary"),
    "qwen3": Expected("CausalLMObjective", ("val/ppl",), {"qk_norm": "rmsnorm"}, pos="rotary"),
    "gemma2": Expected(
        "CausalLMObjective",
        ("val/ppl",),
        {"placement": "sandwich", "window": 16, "global_every": 2, "logit_softcap": 30.0},
        pos="rotary",
    ),
}

SHRINK = ["size=tiny"]  # with conftest's 2 steps, batches of 4, one validation batch


def _data_group(experiment: str) -> str:
    """The experiment's own data choice (`override /data: X` in its defaults), else the default."""
    spec = yaml.safe_load((EXPERIMENT_DIR / f"{experiment}.yaml").read_text()) or {}
    for entry in spec.get("defaults") or []:
        if isinstance(entry, dict) and "override /data" in entry:
            return entry["override /data"]
    return "synthetic"


class Runs:
    """Each experiment's tiny run, made once per module (gpt_finetune starts from nanogpt's)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.results: dict[str, tuple[dict, Path]] = {}

    def get(self, experiment: str) -> tuple[dict, Path]:
        if experiment not in self.results:
            self.results[experiment] = self._train(experiment)
        return self.results[experiment]

    def _train(self, experiment: str) -> tuple[dict, Path]:
        from xfmr.training.run import run_training

        expected = EXPERIMENTS[experiment]
        group = _data_group(experiment)
        assert group in TINY_DATA, (
            f"experiment={experiment} uses data={group}: add a writer of tiny {group} data to "
            f"TINY_DATA in tests/conf/test_experiments.py"
        )
        out = self.root / experiment
        out.mkdir()
        overrides = [f"experiment={experiment}", f"data={group}", *TINY_DATA[group](out), *SHRINK]
        if expected.needs_run:
            overrides.append(f"init_from={self.get(expected.needs_run)[1]}")
        results = run_training(compose_config(out, [*overrides, *expected.overrides]))
        return results, out / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("experiments"))


@pytest.mark.parametrize("experiment", sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml")))
def test_experiment_trains_two_steps_on_tiny_data(experiment: str, runs: Runs) -> None:
    assert experiment in EXPERIMENTS, (
        f"conf/experiment/{experiment}.yaml has no entry in EXPERIMENTS in "
        "tests/conf/test_experiments.py: add one (its objective, metrics and model settings; tiny "
        "data comes from TINY_DATA by its data group)"
    )
    expected = EXPERIMENTS[experiment]
    results, run_dir = runs.get(experiment)
    assert json.loads((run_dir / "results.json").read_text()) == results
    assert results["status"] == "completed" and results["step"] == 2
    metrics = results["metrics"]
    assert math.isfinite(metrics["val/loss"]) and metrics["val/loss"] > 0
    missing = [m for m in expected.metrics if m not in metrics]
    assert not missing, f"{experiment}: no {missing} in {sorted(metrics)}"
    assert all(math.isfinite(metrics[m]) for m in expected.metrics)

    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.objective._target_.rsplit(".", 1)[-1] == expected.objective
    assert {k: saved.model[k] for k in expected.model} == expected.model
    if expected.pos:
        assert saved.model.pos.name == expected.pos
    assert saved.model.d_model == 64, "size=tiny"


def test_gpt_finetune_loads_every_weight_of_the_nanogpt_run(runs: Runs) -> None:
    """The fine-tuning experiment's model is the pretraining experiment's: nothing is left new."""
    results, _ = runs.get("gpt_finetune")
    pretrain_results, pretrained = runs.get("nanogpt_shakespeare_char")
    report = results["init_from"]
    assert report["source"].startswith(str(pretrained))
    assert report["new"] == [] and report["skipped"] == []
    assert report["loaded"] > 0
    assert results["n_parameters"] == pretrain_results["n_parameters"]
    assert (pretrained / "tokenizer.json").read_text() == (
        runs.root / "gpt_finetune" / "run" / "tokenizer.json"
    ).read_text()


def test_gpt_finetune_without_init_from_fails_fast_saying_what_to_give(tmp_path: Path) -> None:
    result = run_cli(["experiment=gpt_finetune", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.output, result.output
    assert "init_from is not set" in result.output and "run directory" in result.output
    assert not (tmp_path / "run" / "checkpoints").exists()


# Text each objective makes something of (`Run.generate`); the others classify, tag or answer.
PROMPTS = {"CausalLMObjective": "the", "Seq2SeqObjective": "eine katze sieht 3 steine .",
           "SpanCorruptionObjective": "the <extra_id_0> sat", "MaskedLMObjective": "the [MASK] sat",
           "MaskedLMNextSentenceObjective": "the [MASK] sat"}  # fmt: skip


@pytest.mark.parametrize("experiment", sorted(EXPERIMENTS))
def test_a_run_is_generated_from_evaluated_and_exported_with_its_defaults_and_no_warning(
    experiment: str, runs: Runs, caplog: pytest.LogCaptureFixture
) -> None:
    """What a newcomer does next with the defaults: generation stays within the length the run
    trained on, evaluation reads the run's own data, export writes its files; nothing warns."""
    import warnings

    from xfmr.api import Run

    _, run_dir = runs.get(experiment)
    run = Run(run_dir)
    prompt = PROMPTS.get(EXPERIMENTS[experiment].objective)
    caplog.clear()  # training's own lines
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING"):
        warnings.simplefilter("always")
        if prompt is not None:
            assert isinstance(run.generate(prompt), str)
        report = run.evaluate(out=run_dir.parent / "eval.json")
        assert math.isfinite(report["loss"])
        assert run.export(run_dir.parent / "model.safetensors").is_file()
    said = [r.getMessage() for r in caplog.records if r.levelno >= 30] + [
        str(w.message) for w in caught
    ]
    assert not said, f"experiment={experiment} warned: {said}"
