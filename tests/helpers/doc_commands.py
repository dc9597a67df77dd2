"""The xfmr command lines of the docs' `checked` blocks, judged in this process as each command
judges its arguments before torch loads, so that a renamed choice, key or flag in the code
fails a test until the docs follow.

A block's commands run in order in a project folder of their own, where the docs' placeholders
stand for tiny real things:

- `PATH`: a folder of tiny corpora: input.txt, new_text.txt, corpus.txt (text), src.txt (one
  input per line), corpus_dir/ (documents: a blank line between them), tinyshakespeare/input.txt,
  and data/, a `paths.data_dir` holding every file the shipped experiments name under it
  (multi30k, sst2, conll2003, squad, ...; `DATASETS`);
- `RUN`, `RUN_DIR`, `GPT_RUN`, `BERT_RUN`, ... and `outputs/train/runs/DATE_TIME`: run
  directories (`RUNS` says what run each stands for);
- any other `DATE_TIME` is left as written (xfmr-compare's parser reads no file).

A run directory is made as `xfmr-train` would leave it for what is judged before torch loads:
its config.yaml is the real composition of its overrides; its tokenizer.json and checkpoints
(best, last, and the periodic ones its callbacks would keep) are empty files, which nothing
before torch loads reads inside. An `xfmr-train ... hydra.run.dir=DIR` that passes leaves such a
run in DIR for the block's later commands (`init_from=DIR`, `run_dir=DIR`), and `xfmr-average`
its averaged checkpoint.

What each command's check covers:

- `xfmr-train`: Hydra's own command-line parser, `xfmr-train`'s group-choice check on the whole
  command line, `--help` as xfmr-train writes it, and the experiment composed and checked by
  `xfmr.compose` (the same overrides, --config-dir, choices, resolution and `check_config`).
  `init_from=` (not `hf:`) must also name something that exists, which xfmr-train would only
  find out once it loads it. `--cfg` is checked as a run: stricter than Hydra's print.
  Under `-m`: the sweep's config composed as Hydra composes it in multirun mode (so a misspelt
  `hydra.sweeper` or `hydra.launcher` key fails as Hydra fails it), the sweep's settings that
  xfmr's sweeper refuses before any job starts (direction, workers, interval sweeps without a
  search, sampler and pruner names and arguments, shared stores), and then its jobs composed
  and checked one by one: every value of every swept key at least once (the first values
  elsewhere; an interval at both ends), or the first job alone past `MAX_JOBS` compositions.
  Not checked: what a job finds out only once training starts, as for any run.
- `xfmr-generate`, `-eval`, `-average`, `-export`, `-attention`, `-compare`: the command's own
  `main()`, which parses and judges its arguments, the run directory and its files, stopped where
  its work would begin (`WORK`), before anything loads a checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from helpers.docs import DocBlock
from helpers.runs import CORPUS

XFMR_COMMANDS = ("xfmr-train", "xfmr-eval", "xfmr-generate", "xfmr-average", "xfmr-export",
                 "xfmr-attention", "xfmr-compare")  # fmt: skip
# Where each command's work begins: replaced by a function that stops the command there.
WORK = {
    "xfmr-generate": ("xfmr.cli.generate", ["xfmr.runs.loading.load_run"]),
    "xfmr-eval": ("xfmr.cli.eval", ["xfmr.runs.loading.load_run"]),
    "xfmr-average": ("xfmr.cli.average", ["xfmr.runs.averaging.average_checkpoints"]),
    "xfmr-export": (
        "xfmr.cli.export",
        ["xfmr.runs.export.export_run", "xfmr.runs.export_hf.export_hf"],
    ),
    "xfmr-attention": ("xfmr.cli.attention", ["xfmr.runs.loading.load_run"]),
    "xfmr-compare": ("xfmr.cli.compare", ["xfmr.cli.compare.compare"]),
}
# The runs the placeholders stand for, as xfmr-train overrides (PATH as in the docs).
RUNS: dict[str, tuple[str, ...]] = {
    # A run of the default experiment that keeps periodic checkpoints (for xfmr-average).
    "RUN": ("callbacks.periodic_checkpoint.every_n_train_steps=100",),
    "RUN_DIR": ("callbacks.periodic_checkpoint.every_n_train_steps=100",),
    "outputs/train/runs/DATE_TIME": (),  # where a run of `xfmr-train` alone goes
    "GPT_RUN": ("arch=decoder", "pos=learned"),
    "LLAMA_RUN": ("pos=rotary", "model.norm=rmsnorm", "model.activation=swiglu"),
    "BERT_RUN": (
        "arch=encoder",
        "objective=mlm",
        "tokenizer=wordpiece",
        "data=text",
        "data.path=PATH/input.txt",
    ),
    "T5_RUN": ("experiment=t5_span", "data.path=PATH/input.txt"),
    "MT_RUN": ("experiment=transformer_multi30k", "paths.data_dir=PATH/data"),
}
RUN_PLACEHOLDER = re.compile(
    r"(?<![\w/])(outputs/train/runs/DATE_TIME|RUN_DIR|[A-Z][A-Z0-9]*_RUN|RUN)(?!\w)"
)
PATH_PLACEHOLDER = re.compile(r"(?<!\w)PATH(?!\w)")
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
REDIRECTIONS = (">", ">>", "<", "&>", "2>")
OUTPUT_KEYS = ("hydra.run.dir=", "hydra.sweep.dir=")  # where a command puts what it makes
MAX_JOBS = 8  # compositions per sweep; each takes about a third of a second


@dataclass(frozen=True)
class Project:
    """Where one block's commands run: its folder (the working directory, where the
    placeholder runs are made under runs/), and the corpora PATH stands for."""

    root: Path
    corpora: Path


class _WorkBegins(BaseException):
    """Raised where a command's work would begin: everything before it judged the arguments.
    A BaseException, so that no `except Exception` in the command takes it for a failure."""


# --------------------------------------------------------------------------- blocks and lines


def check_block(block: DocBlock, corpora: Path, folder: Path) -> list[str]:
    """Each problem of a `checked` block as `FILE:LINE: `COMMAND`: why`, its commands run in
    order in `folder` (made empty) with PATH standing for `corpora` (`write_corpora`)."""
    folder.mkdir(parents=True, exist_ok=False)
    project = Project(folder, corpora)
    problems = []
    for offset, line in command_lines(block.text):
        problem = check_line(line, project)
        if problem:
            problems.append(f"{block.path}:{block.line + 1 + offset}: `{line}`: {problem}")
    return problems


def command_lines(text: str) -> list[tuple[int, str]]:
    """(offset of its first line in `text`, logical line): `\\` continuations joined, blank and
    comment lines skipped, a trailing `# comment` cut."""
    lines = text.splitlines()
    found, index = [], 0
    while index < len(lines):
        start, logical = index, lines[index]
        while logical.rstrip().endswith("\\") and index + 1 < len(lines):
            index += 1
            logical = logical.rstrip()[:-1].rstrip() + " " + lines[index].strip()
        index += 1
        logical = without_comment(logical).strip()
        if logical:
            found.append((start, logical))
    return found


def without_comment(line: str) -> str:
    """`line` up to a `#` that starts a word outside quotes, as the shell reads it."""
    quote, escaped = None, False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def check_line(line: str, project: Project) -> str | None:
    """Why one command line of a checked block fails, or None."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, ""
        words = list(lexer)
    except ValueError as e:
        return f"the shell cannot read it ({e})"
    env, words = _environment(words)
    if not words or words[0] not in XFMR_COMMANDS:
        return "not an xfmr-* command line: mark the block illustrative or run it in a test"
    words, problem = _without_redirections(words)
    if problem:
        return problem
    try:
        args = [substitute(word, project) for word in words[1:]]
    except LookupError as e:
        return str(e)
    with _inside(project, env):
        if words[0] == "xfmr-train":
            return check_train(args)
        return check_tool(words[0], args)


def _environment(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """`NAME=value` assignments before the command, and the rest."""
    env = {}
    while words and ENV_ASSIGNMENT.fullmatch(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def _without_redirections(words: list[str]) -> tuple[list[str], str | None]:
    kept, index = [], 0
    while index < len(words):
        word = words[index]
        if word in REDIRECTIONS:
            index += 2  # the operator and its file
            continue
        if word in ("|", "||", "&&", ";", "&"):
            return kept, f"`{word}`: one xfmr command a line, nothing piped or chained to it"
        kept.append(word)
        index += 1
    return kept, None


@contextlib.contextmanager
def _inside(project: Project, env: dict[str, str]) -> Iterator[None]:
    """In the project's folder, with the line's environment (PYTHONPATH also on sys.path) and a
    cache directory of its own."""
    saved_env, saved_path, cwd = dict(os.environ), list(sys.path), Path.cwd()
    os.chdir(project.root)
    os.environ.update({"XFMR_CACHE_DIR": str(project.root / ".cache"), **env})
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [str((project.root / p).resolve()) for p in paths]
    try:
        yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path


# --------------------------------------------------------------------------- placeholders


def substitute(word: str, project: Project) -> str:
    """`word` with PATH and the run placeholders standing for the project's tiny things. Where
    a run goes (`hydra.run.dir=RUN`), the placeholder names a folder for the command to fill."""
    word = PATH_PLACEHOLDER.sub(lambda _: str(project.corpora), word)
    made = not word.startswith(OUTPUT_KEYS)
    return RUN_PLACEHOLDER.sub(lambda m: str(placeholder_run(m[1], project, made=made)), word)


def placeholder_run(name: str, project: Project, *, made: bool = True) -> Path:
    """The run directory `name` stands for: the run an earlier command of the block left there,
    else (`made`) one made now from RUNS."""
    if name not in RUNS:
        raise LookupError(f"{name}: no run of that name stands ready; RUNS has {', '.join(RUNS)}")
    run_dir = project.root / (name if "/" in name else f"runs/{name}")
    if not made or run_dir.exists():
        return run_dir
    import xfmr

    overrides = [substitute(o, project) for o in RUNS[name]]
    with _inside(project, {}):
        experiment = xfmr.compose(*overrides, f"hydra.run.dir={run_dir}")
    leave_run(run_dir, experiment.config)
    return run_dir


def leave_run(run_dir: Path, config) -> None:
    """The files of a finished run that the commands judge before torch loads: its config as
    composed, and empty files for its tokenizer and checkpoints (nothing reads inside them
    before torch loads): best, last and the periodic ones its callbacks would have kept."""
    from xfmr.run_dir import files

    checkpoints = run_dir / files.CHECKPOINT_DIR
    checkpoints.mkdir(parents=True, exist_ok=True)
    (run_dir / files.CONFIG_FILE).write_text(config.to_yaml())
    (run_dir / files.TOKENIZER_FILE).write_text("{}")
    periodic = config.callbacks.get("periodic_checkpoint")
    every = (periodic.get("every_n_train_steps") if periodic else 0) or 0
    steps = list(range(every, int(config.trainer.max_steps) + 1, every)) if every else []
    kept = steps[-int(periodic.get("save_top_k") or 0) :] if steps else []
    filename = periodic.get("filename") if periodic else ""
    names = [filename.format(step=step) + files.CHECKPOINT_SUFFIX for step in kept]
    for name in [files.BEST_CHECKPOINT, files.LAST_CHECKPOINT, *names]:
        (checkpoints / name).write_bytes(b"")


# --------------------------------------------------------------------------- xfmr-train


def check_train(args: list[str]) -> str | None:
    """xfmr-train's judgement of `args` (see the module's docstring)."""
    from hydra._internal.utils import get_args_parser

    from xfmr.cli.train import check_group_choices, help_text
    from xfmr.errors import UserError
    from xfmr.paths import config_dir

    args = [arg for arg in args if arg != "--check"]  # xfmr-train's own: the checks, no run
    parser = get_args_parser()
    parser.prog = "xfmr-train"
    parsed, said = _exits(lambda: parser.parse_args(args))
    if parsed is SystemExit:  # --version, or what Hydra's parser refuses
        return said
    _, said = _exits(lambda: check_group_choices(args, config_dir()))
    if said is not None:
        return said
    if parsed.help:
        help_text(args, config_dir())  # None: Hydra's own help, which reads nothing more
        return None
    if parsed.config_path or parsed.config_name or parsed.experimental_rerun:
        return "--config-path, --config-name and --experimental-rerun are not checked here"
    try:
        if parsed.multirun:
            return check_sweep(parsed.overrides, parsed.config_dir)
        return _check_run(parsed.overrides, parsed.config_dir)
    except UserError as e:
        return str(e)


def _check_run(overrides: list[str], config_dir: str | None) -> str | None:
    import xfmr

    experiment = xfmr.compose(*overrides, config_dir=config_dir)
    problem = _init_from_problem(experiment.config)
    if problem:
        return problem
    if any(o.startswith("hydra.run.dir=") for o in overrides):
        leave_run(experiment.run_dir, experiment.config)  # for the block's later commands
    return None


def _init_from_problem(config) -> str | None:
    """xfmr-train leaves an init_from it cannot read to the run, which names it once it loads
    it; the docs' commands name one that exists (a placeholder's or an earlier command's run)."""
    init_from = str(config.init_from or "")
    if init_from and not init_from.startswith("hf:") and not Path(init_from).exists():
        return f"init_from={init_from!r} does not exist: no placeholder or earlier command made it"
    return None


def check_sweep(overrides: list[str], config_dir: str | None) -> str | None:
    """An `xfmr-train -m` sweep: its config, its settings and its jobs."""
    import xfmr

    master, jobs = _sweep_jobs(overrides, config_dir)
    fixed = list(master.hydra.overrides.hydra)
    for job in jobs:
        xfmr.compose(*fixed, *job, config_dir=config_dir)
    return None


def _sweep_jobs(overrides: list[str], config_dir: str | None):
    """The sweep's config, composed as Hydra composes it under -m, and the jobs to check, as
    lists of overrides. What xfmr's sweeper refuses before its first job (`run_sweep` in
    xfmr.sweeps.sweep) is refused here too."""
    from omegaconf import OmegaConf

    from xfmr.errors import UserError
    from xfmr.sweeps.search import build_pruner, build_sampler, search_space
    from xfmr.sweeps.sweep import check_sweep

    with _hydra(config_dir) as hydra:
        master = _compose_multirun(hydra, overrides)
        sweeper = master.hydra.sweeper
        params = [f"{k}={v}" for k, v in (sweeper.params or {}).items()]
        task = list(master.hydra.overrides.task)
        parsed = _parse(hydra, [*params, *task])
    launcher = str(master.hydra.launcher._target_).rsplit(".", 1)[-1]
    check_sweep(sweeper, master, parsed, launcher=launcher)
    if sweeper.sampler:
        searched, fixed = search_space(parsed)
        if not searched:
            raise UserError("a search needs a search space: hydra.sweeper.params or a swept key")
        args = OmegaConf.to_container(sweeper.sampler_args, resolve=True)
        build_sampler(str(sweeper.sampler), args, searched, seed_offset=0)
        build_pruner(sweeper.pruner, OmegaConf.to_container(sweeper.pruner_args, resolve=True))
        swept = [[p.override(v) for v in _values(p.distribution)] for p in searched]
    else:
        fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
        swept = [
            [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            for o in parsed
            if o.is_sweep_override()
        ]
    return master, [[*fixed, *job] for job in covering(swept)]


def covering(swept: list[list[str]]) -> list[list[str]]:
    """Jobs in which every value of every swept key appears at least once: the first values,
    then each other value of one key with the first of the rest; the first job alone if that
    makes more than MAX_JOBS."""
    first = [values[0] for values in swept]
    jobs = [first]
    for index, values in enumerate(swept):
        jobs += [first[:index] + [value] + first[index + 1 :] for value in values[1:]]
    return jobs if len(jobs) <= MAX_JOBS else [first]


def _values(distribution) -> list:
    """Values of an Optuna distribution for a job: a categorical's choices, a range's ends."""
    if hasattr(distribution, "choices"):
        return list(distribution.choices)
    return [distribution.low, distribution.high]


@contextlib.contextmanager
def _hydra(config_dir: str | None):
    """Hydra started as xfmr-train starts it, with --config-dir searched as Hydra searches it
    (as `xfmr.api.composing` does)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra

    from xfmr.api.composing import TASK_NAME
    from xfmr.errors import UserError
    from xfmr.paths import config_dir as shipped

    search_path = create_config_search_path(str(shipped()))
    if config_dir is not None:
        extra = Path(config_dir).absolute()
        if not extra.is_dir():  # in Hydra's words
            raise UserError(f"Additional config directory '{extra}' not found")
        search_path.prepend(
            provider="command-line", path=f"file://{extra}", anchor=SearchPathQuery("schema")
        )
    GlobalHydra.instance().clear()
    try:
        yield Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=search_path)
    finally:
        GlobalHydra.instance().clear()


def _compose_multirun(hydra, overrides: list[str]):
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    from xfmr.errors import UserError

    try:
        return hydra.compose_config(
            "train", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False
        )
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(" ".join(str(e).split())) from None


def _parse(hydra, overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from xfmr.errors import UserError

    try:
        return OverridesParser.create(config_loader=hydra.config_loader).parse_overrides(overrides)
    except HydraException as e:
        raise UserError(" ".join(str(e).split())) from None


# --------------------------------------------------------------------------- the other commands


def check_tool(command: str, args: list[str]) -> str | None:
    """The command's own `main()` on `args`, stopped where its work would begin: None if it got
    there (or printed its help), else what it said on its way out."""
    import importlib
    from unittest import mock

    module_name, work = WORK[command]
    module = importlib.import_module(module_name)

    def begins(*args, **kwargs):
        raise _WorkBegins

    with contextlib.ExitStack() as stack:
        for target in work:
            stack.enter_context(mock.patch(target, begins))
        if command == "xfmr-compare":
            outcome, said = _exits(lambda: module.main(args))
        else:
            stack.enter_context(mock.patch.object(sys, "argv", [command, *args]))
            outcome, said = _exits(module.main)
    if said is None and outcome not in (_WorkBegins, SystemExit):
        raise AssertionError(f"{command} {args} ended without reaching its work: {WORK[command]}")
    if said is None and command == "xfmr-average":
        _leave_average(args)
    return said


def _leave_average(args: list[str]) -> None:
    """What xfmr-average writes, for the block's later commands (`checkpoint=averaged`)."""
    from xfmr.run_dir.files import AVERAGED_CHECKPOINT, CHECKPOINT_DIR

    settings = dict(arg.split("=", 1) for arg in args if "=" in arg)
    out = settings.get("out") or Path(settings["run_dir"]) / CHECKPOINT_DIR / AVERAGED_CHECKPOINT
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_bytes(b"")


def _exits(call: Callable[[], object]) -> tuple[object, str | None]:
    """(what `call` returned: its value, `_WorkBegins` if its work would have begun, or
    `SystemExit` if it exited 0; what it said on stderr if it exited non-zero, else None)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            return call(), None
    except _WorkBegins:
        return _WorkBegins, None
    except SystemExit as e:
        if e.code in (0, None):
            return SystemExit, None
        said = " ".join(stderr.getvalue().split()) or f"exit code {e.code}"
        _, sep, error = said.partition(": error: ")  # argparse's usage block, then its error
        return SystemExit, error if said.startswith("usage: ") and sep else said


# --------------------------------------------------------------------------- PATH's corpora


def write_corpora(root: Path) -> Path:
    """The tiny corpora PATH stands for (see the module's docstring), under `root`."""
    text = CORPUS
    for name in ("input.txt", "new_text.txt", "corpus.txt", "tinyshakespeare/input.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "src.txt").write_text("the quick brown\na small cat\n")
    documents = "\n\n".join("\n".join(text.splitlines()[i : i + 3]) for i in range(0, 60, 3))
    (root / "corpus_dir").mkdir()
    for name in ("a.txt", "b.txt"):
        (root / "corpus_dir" / name).write_text(documents + "\n")
    data = root / "data"
    for name, write in DATASETS.items():
        (data / name).mkdir(parents=True)
        write(data / name)
    missing = [path for path in experiment_data_files() if not (data / path).is_file()]
    assert not missing, f"no tiny {missing} in helpers.doc_commands.DATASETS"
    return root


def experiment_data_files() -> list[str]:
    """The files the shipped experiments name under `${paths.data_dir}`."""
    from xfmr.paths import config_dir

    prefix = "${paths.data_dir}/"
    named = re.findall(re.escape(prefix) + r"(\S+)", "\n".join(
        p.read_text() for p in (config_dir() / "experiment").glob("*.yaml")))  # fmt: skip
    return sorted(set(named))


def _multi30k(folder: Path) -> None:
    pairs = [("eine katze sitzt .", "a cat sits ."), ("ein hund läuft .", "a dog runs ."),
             ("zwei vögel singen .", "two birds sing .")] * 4  # fmt: skip
    for split in ("train", "val", "test_2016_flickr"):
        (folder / f"{split}.de").write_text("".join(de + "\n" for de, _ in pairs))
        (folder / f"{split}.en").write_text("".join(en + "\n" for _, en in pairs))


def _sst2(folder: Path) -> None:
    rows = "".join(f"{text}\t{label}\n" for text, label in
                   [("a fine warm film", 1), ("a dull cold film", 0)] * 4)  # fmt: skip
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)


def _conll2003(folder: Path) -> None:
    sentence = "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n. . O O\n\n"
    for split in ("train", "dev", "test"):
        (folder / f"{split}.txt").write_text("-DOCSTART- -X- -X- O\n\n" + sentence * 4)


def _squad(folder: Path) -> None:
    context = "The cat sat on the mat in Paris."
    qas = [{"id": f"q{i}", "question": "Where did the cat sit?",
            "answers": [{"text": "on the mat", "answer_start": context.index("on the mat")}]}
           for i in range(4)]  # fmt: skip
    document = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}  # fmt: skip
    for split in ("train", "dev"):
        (folder / f"{split}-v1.1.json").write_text(json.dumps(document))


def _tinyshakespeare(folder: Path) -> None:
    (folder / "input.txt").write_text(CORPUS)


# The datasets under PATH/data, each in the files and format its experiment reads.
DATASETS: dict[str, Callable[[Path], None]] = {
    "multi30k": _multi30k,
    "sst2": _sst2,
    "conll2003": _conll2003,
    "squad": _squad,
    "tinyshakespeare": _tinyshakespeare,
}
