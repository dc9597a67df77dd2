"""The lm-eval tasks xfmr ships, built for one run, and a person's own from a folder.

Each shipped task is a YAML file in `task_files/` (lm-eval's own format, modelled on the task
it copies) over JSON Lines that `prepare_tasks` writes for the run into a work folder, from
data on this machine and fixed seeds: the same run gets the same questions every time, and
nothing is downloaded (`dataset_path: json`, the rows' file by absolute path).

    xfmr_minimal_pairs   BLiMP's format in the default toy language (xfmr.data.synthetic): a
                         group of one task per rule broken; chance 0.5
    xfmr_next_line       HellaSwag's format over the run's own validation text: a context and
                         four candidate next lines; chance 0.25
    xfmr_translation     the test split beside a parallel run's training files (Multi30k's
                         test_2016_flickr), generated and scored by BLEU; no chance level

A task's chance level is its YAML's `metadata.chance`, for the shipped tasks and a person's
own alike; scores are centred as nanochat's CORE centres them, (score - chance) / (1 - chance).
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xfmr.config import RunConfig
from xfmr.data.formats.parallel import read_parallel
from xfmr.data.synthetic import PHENOMENA, minimal_pair
from xfmr.errors import UserError
from xfmr.evaluation.checks import require_lm_eval

TASK_FILES = Path(__file__).resolve().parent / "task_files"
# What prepare_tasks writes under its work_dir: the YAMLs lm-eval reads, the rows they name,
# and the `datasets` cache of those rows (kept there rather than in ~/.cache).
INCLUDE_FOLDER, DATA_FOLDER, CACHE_FOLDER = "tasks", "data", "hf_datasets"
# Where a person's own tasks are copied inside the include folder, as the folder held them.
OWN_FOLDER = "own"
# Marks an include folder as prepare_tasks's own, which the next call may empty.
WRITTEN_MARK = ".xfmr-tasks"

MINIMAL_PAIRS_SEED = 0
PAIRS_PER_PHENOMENON = 150
NEXT_LINE_SEED = 0
NEXT_LINE_QUESTIONS = 500
CONTEXT_LINES = 3
ENDINGS = 4
# The test split `xfmr-data get multi30k` lays out beside train.de and train.en.
MULTI30K_TEST = "test_2016_flickr"


@dataclass(frozen=True)
class PreparedTasks:
    """Tasks ready for lm-eval: `TaskManager(include_path=include_path)` finds each of `names`.

    Args:
        include_path: a folder of lm-eval task YAMLs (the shipped ones asked for, written for
            this run, and a person's own, copied as they are).
        names: the task (or group, or tag) names to run, as asked, each once.
        chance: the chance level of each named task's main metric, and of each task a named
            group or tag holds, where its YAML states one (`metadata.chance`); absent for a
            task without one (BLEU).
    """

    include_path: Path
    names: list[str]
    chance: dict[str, float]


@dataclass(frozen=True)
class TaskInputs:
    """What a shipped task is built from: the run's config, and the files asked for."""

    config: RunConfig
    translation_files: tuple[Path, Path] | None = None


@dataclass(frozen=True)
class ShippedTask:
    """A task (or group) xfmr ships.

    Args:
        leaves: the tasks that hold rows, each `task_files/<leaf>.yaml`.
        files: other files of `task_files/` it needs, copied as they are (a group, a template).
        rows: the rows of each leaf, built for one run.
    """

    leaves: tuple[str, ...]
    files: tuple[str, ...]
    rows: Callable[[TaskInputs], dict[str, list[dict[str, Any]]]]

    def names(self, name: str) -> tuple[str, ...]:
        """Its own name (a group's, or its one task's) and its tasks'."""
        return tuple(dict.fromkeys((name, *self.leaves)))


def prepare_tasks(
    run: Any,
    names: Sequence[str],
    *,
    tasks_dir: Path | None,
    work_dir: Path,
    translation_files: tuple[str | Path, str | Path] | None = None,
) -> PreparedTasks:
    """Write the tasks `names` for `run` (anything with a `config`: a loaded or an API run)
    into `work_dir`, and say where lm-eval finds them.

    Args:
        run: the run the tasks are built for (its data config: the validation text of a text
            corpus, the training files of a parallel one).
        names: shipped task names (`SHIPPED`, or one task of a shipped group) and names of
            `tasks_dir`'s tasks, groups or tags.
        tasks_dir: a folder of lm-eval task YAMLs of a person's own, or None.
        work_dir: a folder of xfmr's own; its `tasks` folder is written afresh.
        translation_files: xfmr_translation's test pairs as aligned (source, target) files;
            None: Multi30k's test split beside the run's `data.train_source`.

    Raises:
        UserError: a name neither shipped nor in `tasks_dir`, a task that does not fit the
            run, or missing files, each in one line.
    """
    require_lm_eval()
    work_dir = Path(work_dir).absolute()
    include_path = _fresh_include_folder(work_dir)
    asked = list(dict.fromkeys(names))
    own = _copy_own_tasks(tasks_dir, work_dir) if tasks_dir is not None else []
    _check_names(asked, own, tasks_dir)
    files = tuple(Path(f) for f in translation_files) if translation_files else None
    inputs = TaskInputs(config=run.config, translation_files=files)
    for name, task in SHIPPED.items():
        if set(task.names(name)) & set(asked):
            _write_shipped(task, inputs, include_path, work_dir)
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(include_path), include_defaults=False)
    assert set(asked) <= set(manager.all_tasks), (asked, manager.all_tasks)
    return PreparedTasks(include_path, asked, chance_levels(manager, asked))


def shipped_names() -> list[str]:
    """Every name `prepare_tasks` knows without a tasks_dir: each group and each task."""
    return [n for name, task in SHIPPED.items() for n in task.names(name)]


def _fresh_include_folder(work_dir: Path) -> Path:
    """`work_dir`'s include folder, emptied; one that prepare_tasks did not write is refused,
    not deleted."""
    include_path = work_dir / INCLUDE_FOLDER
    if include_path.exists():
        if not (include_path / WRITTEN_MARK).is_file():
            raise UserError(
                f"work_dir={str(work_dir)!r} holds a {INCLUDE_FOLDER}/ folder that xfmr did not "
                "write: give an empty folder, or one an earlier prepare_tasks wrote"
            )
        shutil.rmtree(include_path)
    include_path.mkdir(parents=True)
    (include_path / WRITTEN_MARK).write_text("written by xfmr.evaluation.tasks.prepare_tasks\n")
    return include_path


# -- names -------------------------------------------------------------------------------------
def _copy_own_tasks(tasks_dir: Path, work_dir: Path) -> list[str]:
    """Copy `tasks_dir` whole into the include folder (its YAMLs, their templates and
    `!function` modules stay side by side), and the names lm-eval finds in it."""
    from lm_eval.tasks import TaskManager

    tasks_dir = Path(tasks_dir)
    if not tasks_dir.is_dir():
        raise UserError(f"tasks_dir={str(tasks_dir)!r} is not a folder of lm-eval task YAMLs")
    destination, work = work_dir / INCLUDE_FOLDER / OWN_FOLDER, work_dir.resolve()

    def skipped(folder: str, entries: list[str]) -> list[str]:  # a work_dir inside tasks_dir too
        return [e for e in entries if e == "__pycache__" or Path(folder, e).resolve() == work]

    shutil.copytree(tasks_dir, destination, ignore=skipped)
    own = TaskManager(include_path=str(destination), include_defaults=False).all_tasks
    clash = sorted(set(own) & set(shipped_names()))
    if clash:
        raise UserError(
            f"tasks_dir={str(tasks_dir)!r} defines {', '.join(clash)}, a name xfmr ships: "
            "rename the task of your own"
        )
    return own


def _check_names(asked: list[str], own: list[str], tasks_dir: Path | None) -> None:
    if not asked:
        raise UserError(f"tasks= names no task: use one of {', '.join(shipped_names())}")
    unknown = [n for n in asked if n not in shipped_names() and n not in own]
    if not unknown:
        return
    where = (
        f"tasks_dir={str(tasks_dir)!r} has {', '.join(own) or 'no task lm-eval reads'}"
        if tasks_dir is not None
        else "give tasks_dir= for tasks of your own"
    )
    raise UserError(
        f"tasks={','.join(unknown)}: no such task; xfmr ships {', '.join(shipped_names())}; {where}"
    )


def chance_levels(manager: Any, names: Sequence[str]) -> dict[str, float]:
    """`metadata.chance` of each named task and of each task a named group or tag holds.

    Reads `TaskManager.task_index` (checked against lm-eval 0.4.13): each entry's `kind`
    (TASK, PY_TASK, GROUP, TAG), its `cfg` with includes resolved, and a tag's `tags` (its
    tasks)."""
    chance: dict[str, float] = {}
    seen: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop(0)
        entry = manager.task_index.get(name)
        if name in seen or entry is None:
            continue
        seen.add(name)
        cfg = entry.cfg or {}
        level = (cfg.get("metadata") or {}).get("chance")
        if level is not None:
            chance[name] = _chance_level(level, name, entry.yaml_path)
        if entry.kind.name == "GROUP":
            members = cfg.get("task") or []
            pending += [m.get("task") if isinstance(m, dict) else m for m in members]
        elif entry.kind.name == "TAG":
            pending += sorted(entry.tags)
    return chance


def _chance_level(level: Any, name: str, path: Path | None) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 <= level < 1:
        raise UserError(
            f"task {name} ({path}): metadata.chance={level!r} is not valid: give the score a "
            "model that guesses gets, a number in [0, 1)"
        )
    return float(level)


# -- writing -----------------------------------------------------------------------------------
def _write_shipped(task: ShippedTask, inputs: TaskInputs, include_path: Path, work_dir: Path):
    for file in task.files:
        shutil.copy(TASK_FILES / file, include_path / file)
    rows = task.rows(inputs)
    assert set(rows) == set(task.leaves), (sorted(rows), task.leaves)
    for leaf, leaf_rows in rows.items():
        data = work_dir / DATA_FOLDER / f"{leaf}.jsonl"
        _write_if_changed(
            data, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in leaf_rows)
        )
        shipped = (TASK_FILES / f"{leaf}.yaml").read_text(encoding="utf-8")
        assert "dataset_kwargs" not in yaml.safe_load(shipped), leaf
        files = {
            "data_files": {"test": str(data)},
            "cache_dir": str(work_dir / CACHE_FOLDER),
        }
        written = shipped + yaml.safe_dump({"dataset_kwargs": files}, allow_unicode=True)
        (include_path / f"{leaf}.yaml").write_text(written, encoding="utf-8")


def _write_if_changed(path: Path, text: str) -> None:
    """Rows unchanged keep their file's time, so `datasets` reuses what it prepared from them."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- xfmr_minimal_pairs ------------------------------------------------------------------------
def minimal_pairs(
    *, seed: int = MINIMAL_PAIRS_SEED, per_phenomenon: int = PAIRS_PER_PHENOMENON
) -> dict[str, list[dict[str, Any]]]:
    """`per_phenomenon` distinct pairs of each rule (`xfmr.data.synthetic.PHENOMENA`), in
    BLiMP's columns; each rule's pairs drawn from a generator of its own, so one rule's pairs
    do not change when another's count does."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for phenomenon in PHENOMENA:
        rng = random.Random(f"{phenomenon}:{seed}")
        pairs: dict[str, str] = {}
        while len(pairs) < per_phenomenon:
            good, bad = minimal_pair(rng, phenomenon)
            pairs.setdefault(good, bad)
        rows[_minimal_pairs_task(phenomenon)] = [
            {"sentence_good": good, "sentence_bad": bad, "phenomenon": phenomenon, "pair_id": i}
            for i, (good, bad) in enumerate(pairs.items())
        ]
    return rows


def _minimal_pairs_task(phenomenon: str) -> str:
    return f"xfmr_minimal_pairs_{phenomenon}"


# -- xfmr_next_line ----------------------------------------------------------------------------
def validation_text(config: RunConfig) -> str:
    """The text a run of a text corpus validates on and never trains on: its data module's own
    split (`TextCorpusDataModule.split_text`, the tail `data.val_fraction`)."""
    if config.data.kind != "text":
        raise UserError(
            f"xfmr_next_line reads the validation text of a text corpus (data=text, synthetic); "
            f"this run's data ({config.data.target.path}) gives {config.data.kind}"
        )
    return config.data.build().split_text()[1]


def next_line_questions(
    validation: str, *, count: int = NEXT_LINE_QUESTIONS, seed: int = NEXT_LINE_SEED
) -> list[dict[str, Any]]:
    """Up to `count` questions in HellaSwag's shape: `context` (the text from CONTEXT_LINES
    lines back, blank lines kept), `endings` (the line that follows and ENDINGS - 1 lines drawn
    from elsewhere in `validation`) and `label` (the true ending's place, drawn too)."""
    # The first line begins where the split's cut fell, perhaps mid-line in the training text.
    lines = validation.split("\n")[1:]
    filled = [i for i, line in enumerate(lines) if line.strip()]
    # (context start, ending) for each line of speech with CONTEXT_LINES lines of text before it
    places = [
        (filled[k - CONTEXT_LINES], filled[k])
        for k in range(CONTEXT_LINES, len(filled))
        if _is_ending(lines[filled[k]])
    ]
    pool = sorted({lines[i] for _, i in places})
    # A question rules out its ending and its context's lines; ENDINGS - 1 must remain.
    needed = CONTEXT_LINES + ENDINGS
    if len(pool) < needed:
        raise UserError(
            f"xfmr_next_line needs {needed} distinct lines that could end a question (a line "
            f"of speech after {CONTEXT_LINES} lines of text) in the run's validation text, "
            f"which has {len(pool)}: give it more text (data.val_fraction)"
        )
    rng = random.Random(seed)
    questions = []
    for start, i in sorted(rng.sample(places, min(count, len(places)))):
        context = lines[start:i]
        endings = _distractors(rng, pool, ruled_out={lines[i], *context})
        label = rng.randrange(ENDINGS)
        endings.insert(label, lines[i])
        questions.append({"context": "\n".join(context), "endings": endings, "label": label})
    return questions


def _is_ending(line: str) -> bool:
    # A line of speech: a speaker's name ("ROMEO:") or a one-word reply would be told apart
    # from the other endings by its form alone.
    return len(line.split()) >= 3 and not line.rstrip().endswith(":")


def _distractors(rng: random.Random, pool: list[str], *, ruled_out: set[str]) -> list[str]:
    chosen: list[str] = []
    while len(chosen) < ENDINGS - 1:
        line = rng.choice(pool)
        if line not in ruled_out and line not in chosen:
            chosen.append(line)
    return chosen


# -- xfmr_translation --------------------------------------------------------------------------
def translation_pairs(inputs: TaskInputs) -> list[dict[str, str]]:
    """The test pairs of a parallel run, `source` -> `target` as the run translates."""
    data = inputs.config.data
    if data.kind != "pairs":
        raise UserError(
            "xfmr_translation translates with a run trained on parallel data (data=parallel); "
            f"this run's data ({data.target.path}) gives {data.kind}"
        )
    source, target = inputs.translation_files or multi30k_test_files(data.settings)
    pairs, _ = read_parallel(source, target)  # an empty line is an error naming file and line
    return [{"source": s, "target": t} for s, t in pairs]


def multi30k_test_files(data: Any) -> tuple[Path, Path]:
    """Multi30k's test split beside the training files: `test_2016_flickr` with the suffixes
    of `data.train_source` and `data.train_target` (.de, .en)."""
    given = [data.get("train_source"), data.get("train_target")]
    if not all(given):
        raise UserError(
            "xfmr_translation: the run's parallel data has no data.train_source to find the "
            "test split beside; give translation_files=(source, target), or a task of your own"
        )
    files = tuple(Path(p).parent / f"{MULTI30K_TEST}{Path(p).suffix}" for p in given)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise UserError(
            f"xfmr_translation: no test split beside data.train_source: {', '.join(missing)} "
            "missing (xfmr-data get multi30k); give translation_files=(source, target)"
        )
    return files[0], files[1]


SHIPPED: dict[str, ShippedTask] = {
    "xfmr_minimal_pairs": ShippedTask(
        leaves=tuple(_minimal_pairs_task(p) for p in PHENOMENA),
        files=("_minimal_pairs_template_yaml", "xfmr_minimal_pairs.yaml"),
        rows=lambda inputs: minimal_pairs(),
    ),
    "xfmr_next_line": ShippedTask(
        leaves=("xfmr_next_line",),
        files=(),
        rows=lambda inputs: {"xfmr_next_line": next_line_questions(validation_text(inputs.config))},
    ),
    "xfmr_translation": ShippedTask(
        leaves=("xfmr_translation",),
        files=(),
        rows=lambda inputs: {"xfmr_translation": translation_pairs(inputs)},
    ),
}
