"""xfmr's shipped tasks as lm-eval reads them: `prepare_tasks` writes YAMLs that lm-eval's
TaskManager indexes and `get_task_dict` loads offline, a person's own tasks beside them, and
`lm_eval.simple_evaluate` scores them: a stand-in LM whose log-likelihoods are fixed gives the
accuracy the rows predict, and lm-eval's HFLM scores a tiny random GPT-2 on them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from helpers.config import compose_config
from xfmr.data.synthetic import PHENOMENA
from xfmr.errors import UserError
from xfmr.evaluation.tasks import (
    CACHE_FOLDER,
    DATA_FOLDER,
    PAIRS_PER_PHENOMENON,
    TASK_FILES,
    prepare_tasks,
    shipped_names,
)

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.model import LM  # noqa: E402
from lm_eval.tasks import TaskManager, get_task_dict  # noqa: E402

PAIRS = [f"xfmr_minimal_pairs_{p}" for p in PHENOMENA]
PLAY = "".join(
    f"SPEAKER {k:03d}:\nthe words of speech {k:03d} go here\nand more of speech {k:03d} too\n\n"
    for k in range(80)
)


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing reaches the hub; nothing is cached outside tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    import datasets.config  # read the variables above at its first import: set them if imported

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_home" / "datasets")


@pytest.fixture(scope="module")
def text_run(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("run")
    (root / "play.txt").write_text(PLAY)
    return SimpleNamespace(
        config=compose_config(root, ["data=text", f"data.path={root / 'play.txt'}"])
    )


def _rows(work_dir: Path, task: str) -> list[dict]:
    lines = (work_dir / DATA_FOLDER / f"{task}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_tasks_load_offline_with_their_chance_levels(text_run, tmp_path) -> None:
    names = ["xfmr_minimal_pairs", "xfmr_next_line"]
    prepared = prepare_tasks(text_run, names, tasks_dir=None, work_dir=tmp_path / "work")
    assert prepared.names == names
    assert prepared.chance == {
        "xfmr_minimal_pairs": 0.5,
        **dict.fromkeys(PAIRS, 0.5),
        "xfmr_next_line": 0.25,
    }
    manager = TaskManager(include_path=str(prepared.include_path), include_defaults=False)
    loaded = get_task_dict(names, manager)
    tasks = {task.config.task: task for task in _leaves(loaded)}
    assert sorted(tasks) == sorted([*PAIRS, "xfmr_next_line"])
    for name in PAIRS:
        assert len(tasks[name].test_docs()) == PAIRS_PER_PHENOMENON
    next_line = tasks["xfmr_next_line"]
    assert len(next_line.test_docs()) == len(_rows(tmp_path / "work", "xfmr_next_line")) > 10
    doc = next_line.test_docs()[0]
    assert next_line.doc_to_choice(doc) == doc["endings"] and len(doc["endings"]) == 4
    assert any((tmp_path / "work" / CACHE_FOLDER).iterdir())  # `datasets`' cache of the rows


def _leaves(loaded: dict) -> list:
    leaves = []
    for value in loaded.values():
        leaves += _leaves(value) if isinstance(value, dict) else [value]
    return leaves


def test_each_shipped_yaml_is_a_task_prepare_tasks_knows(text_run, tmp_path) -> None:
    """The group's list, the shipped files and `shipped_names` say the same tasks."""
    group = TASK_FILES / "xfmr_minimal_pairs.yaml"
    assert yaml.safe_load(group.read_text())["task"] == PAIRS
    files = {p.stem for p in TASK_FILES.glob("*.yaml")}
    assert files == set(shipped_names())


def test_unknown_names_and_clashes_are_refused_in_one_line(text_run, tmp_path) -> None:
    with pytest.raises(UserError, match=r"^tasks=hellaswag: no such task; xfmr ships xfmr_mini"):
        prepare_tasks(text_run, ["hellaswag"], tasks_dir=None, work_dir=tmp_path)
    own = _own_tasks(tmp_path / "own", name="xfmr_next_line")
    with pytest.raises(UserError, match="defines xfmr_next_line, a name xfmr ships"):
        prepare_tasks(text_run, ["xfmr_next_line"], tasks_dir=own, work_dir=tmp_path)
    own = _own_tasks(tmp_path / "mine", name="my_choice")
    with pytest.raises(UserError, match=r"^tasks=nope: .*mine' has my_choice, my_group$"):
        prepare_tasks(text_run, ["nope"], tasks_dir=own, work_dir=tmp_path)


def _own_tasks(folder: Path, *, name: str) -> Path:
    """A folder of a person's own: a task in BLiMP's shape whose YAML includes a template
    beside it and states a chance level, and a group of it."""
    folder.mkdir(parents=True)
    rows = folder / "rows.jsonl"
    rows.write_text(json.dumps({"good": "a b c", "bad": "a b"}) + "\n")
    (folder / "_template_yaml").write_text(
        'output_type: multiple_choice\ndoc_to_text: ""\ndoc_to_target: 0\n'
        'doc_to_choice: "{{[good, bad]}}"\ntest_split: test\nmetric_list:\n  - metric: acc\n'
    )
    (folder / f"{name}.yaml").write_text(
        f"include: _template_yaml\ntask: {name}\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {rows}\nmetadata:\n  chance: 0.3\n"
    )
    (folder / "group.yaml").write_text(f"group: my_group\ntask:\n  - {name}\n")
    return folder


def test_the_work_folder_is_written_afresh_and_a_foreign_one_left_alone(text_run, tmp_path):
    own = _own_tasks(tmp_path / "mine", name="my_choice")
    work_dir = own / "work"  # inside tasks_dir: not copied into itself
    for names in (["my_choice", "xfmr_next_line"], ["my_group"]):
        prepared = prepare_tasks(text_run, names, tasks_dir=own, work_dir=work_dir)
    assert sorted(p.name for p in prepared.include_path.glob("*.yaml")) == []
    assert sorted(p.name for p in (prepared.include_path / "own").rglob("*.yaml")) == [
        "group.yaml",
        "my_choice.yaml",
    ]
    foreign = tmp_path / "project"
    (foreign / "tasks").mkdir(parents=True)
    (foreign / "tasks" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds a tasks/ folder that xfmr did not write"):
        prepare_tasks(text_run, ["xfmr_next_line"], tasks_dir=None, work_dir=foreign)
    assert (foreign / "tasks" / "notes.txt").read_text() == "mine"


class FixedLM(LM):
    """A stand-in model: a continuation's log-likelihood is minus its length in characters
    (the shorter choice wins), and a translation is looked up in `answers`."""

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        super().__init__()
        self.answers = answers or {}

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        return [(-float(len(r.args[1])), False) for r in requests]

    def loglikelihood_rolling(self, requests) -> list[float]:
        raise NotImplementedError

    def generate_until(self, requests) -> list[str]:
        return [self.answers[r.args[0]] for r in requests]


def _evaluate(model, prepared, **settings) -> dict:
    manager = TaskManager(include_path=str(prepared.include_path), include_defaults=False)
    report = lm_eval.simple_evaluate(
        model=model,
        tasks=prepared.names,
        task_manager=manager,
        bootstrap_iters=0,
        log_samples=False,
        **settings,
    )
    return report["results"]


def test_a_fixed_model_scores_what_the_rows_predict(text_run, tmp_path) -> None:
    names = ["xfmr_minimal_pairs", "xfmr_next_line"]
    prepared = prepare_tasks(text_run, names, tasks_dir=None, work_dir=tmp_path)
    results = _evaluate(FixedLM(), prepared)
    shorter_good = []
    for task in PAIRS:  # lm-eval's argmax takes the first of equals: the good sentence
        wins = [len(r["sentence_good"]) <= len(r["sentence_bad"]) for r in _rows(tmp_path, task)]
        assert results[task]["acc,none"] == pytest.approx(sum(wins) / len(wins))
        shorter_good += wins
    assert results["xfmr_minimal_pairs"]["acc,none"] == pytest.approx(
        sum(shorter_good) / len(shorter_good)
    )
    questions = _rows(tmp_path, "xfmr_next_line")
    shortest = [min(range(4), key=lambda i: len(q["endings"][i])) == q["label"] for q in questions]
    assert results["xfmr_next_line"]["acc,none"] == pytest.approx(sum(shortest) / len(shortest))
    assert 0 <= results["xfmr_next_line"]["acc_norm,none"] <= 1
    assert prepared.chance["xfmr_next_line"] == 0.25


def test_translation_is_generated_and_scored_with_bleu(tmp_path) -> None:
    german = ["ein hund läuft im park", "zwei katzen schlafen auf dem sofa"]
    english = ["a dog runs in the park", "two cats sleep on the sofa"]
    for split in ("train", "val", "test_2016_flickr"):
        (tmp_path / f"{split}.de").write_text("\n".join(german) + "\n")
        (tmp_path / f"{split}.en").write_text("\n".join(english) + "\n")
    sides = (("source", "de"), ("target", "en"))
    files = [f"data.{s}_{side}={tmp_path}/{s}.{lang}" for s in ("train", "val") for side, lang in sides]  # fmt: skip
    config = compose_config(tmp_path, ["arch=encoder_decoder", "objective=seq2seq", "data=parallel", *files])  # fmt: skip
    run = SimpleNamespace(config=config)
    prepared = prepare_tasks(run, ["xfmr_translation"], tasks_dir=None, work_dir=tmp_path / "w")
    assert prepared.chance == {}  # BLEU has no chance level
    perfect = FixedLM(dict(zip(german, english, strict=True)))
    assert _evaluate(perfect, prepared)["xfmr_translation"]["bleu,none"] == pytest.approx(100.0)
    wrong = FixedLM(dict(zip(german, ["the sofa", "a park"], strict=True)))
    assert _evaluate(wrong, prepared)["xfmr_translation"]["bleu,none"] < 10


def test_own_tasks_run_beside_the_shipped_ones(text_run, tmp_path) -> None:
    own = _own_tasks(tmp_path / "mine", name="my_choice")
    names = ["my_group", "xfmr_minimal_pairs_a_an"]
    prepared = prepare_tasks(text_run, names, tasks_dir=own, work_dir=tmp_path / "w")
    assert prepared.names == names
    assert prepared.chance == {"my_choice": 0.3, "xfmr_minimal_pairs_a_an": 0.5}
    results = _evaluate(FixedLM(), prepared)
    assert results["my_choice"]["acc,none"] == 0.0  # "a b" is shorter than "a b c"


def test_hflm_scores_a_tiny_random_gpt2_on_the_shipped_tasks(text_run, tmp_path) -> None:
    """lm-eval's own model class over a GPT-2 built offline from a config: the tasks run end
    to end on a real model's log-likelihoods (limit: a few questions each)."""
    transformers = pytest.importorskip("transformers")
    import torch
    from lm_eval.models.huggingface import HFLM

    from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

    names = ["xfmr_minimal_pairs", "xfmr_next_line"]
    prepared = prepare_tasks(text_run, names, tasks_dir=None, work_dir=tmp_path / "w")
    texts = [(tmp_path / "w" / DATA_FOLDER / f).read_text() for f in ("xfmr_next_line.jsonl", "xfmr_minimal_pairs_a_an.jsonl")]  # fmt: skip
    chars = train_tokenizer(TokenizerSpec(kind="char"), iter([PLAY, *texts]))
    chars.save(tmp_path / "tokenizer.json")
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tmp_path / "tokenizer.json"), eos_token="<unk>"
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=chars.vocab_size, n_positions=256, n_embd=32, n_layer=2, n_head=2
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    hflm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=16, device="cpu")
    results = _evaluate(hflm, prepared, limit=8)
    for task in [*PAIRS, "xfmr_next_line"]:
        assert 0 <= results[task]["acc,none"] <= 1, task
    assert set(prepared.chance) >= {*PAIRS, "xfmr_next_line"}
