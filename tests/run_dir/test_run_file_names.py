"""The names of a run's, a sweep's and an export's files are spelled once, in
`xfmr.run_dir.files`: a string literal anywhere else in src/xfmr that holds one fails here, naming
its file and line. Docstrings and comments may say the names; code uses the constants. Where a
name is also another library's, a test holds the two together.

The names hunted are the module's constants ending in _FILE, _DIR, _GLOB or _CHECKPOINT. A file
name (it has a dot) is found inside any literal (`f"{CHECKPOINT_DIR}/last.ckpt"`); a folder's
plain word (checkpoints, ddp) only as the whole literal or beside a slash, so prose such as "the
periodic checkpoints" in a message is left alone. `hf` (HF_FOLDER) is not hunted: it is also the
export format and init_from's prefix, spelled as such everywhere.

Hugging Face folders (xfmr-export format=hf, init_from=hf:PATH) have names of their own,
HF_CONFIG_FILE and the like, which transformers fixes; they share the module so that a
literal `tokenizer.json` is never ambiguous.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from omegaconf import OmegaConf

import xfmr.run_dir.files as run_files
from xfmr.paths import config_dir

SRC = Path(__file__).resolve().parents[2] / "src" / "xfmr"
HOME = SRC / "run_dir" / "files.py"
NAME_SUFFIXES = ("_FILE", "_DIR", "_GLOB", "_CHECKPOINT")

# (module under src/xfmr, name): why a literal there is not the run's file of that name.
NOT_THE_RUN_FILE = {
    ("training/launch.py", "ddp"): "Lightning's strategy names (ddp, ddp_spawn, ddp_notebook)",
    ("text/tokenizers.py", "tokenizer.json"): (
        "the tokenizers library's file format that tokenizer.path names; xfmr.text sits beside "
        "xfmr.run_dir in pyproject's layers and may not import it"
    ),
}


def hunted_names() -> dict[str, str]:
    """{file name: the constants of xfmr.run_dir.files that spell it}."""
    names: dict[str, str] = {}
    for constant, value in vars(run_files).items():
        if constant.isupper() and constant.endswith(NAME_SUFFIXES) and isinstance(value, str):
            names[value] = f"{names[value]} or {constant}" if value in names else constant
    return names


def _pattern(name: str) -> re.Pattern[str]:
    """Where `name` is spelled in a literal: a file name anywhere (not as the tail of a longer
    name: generation_config.json is not config.json), a folder's word whole or beside a slash."""
    edge = r"(?<![\w.-])"
    if "." in name:
        return re.compile(edge + re.escape(name))
    word = re.escape(name)
    return re.compile(rf"^{word}$|{edge}{word}/|/{word}(?![\w.-])")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _functions(tree: ast.AST) -> dict[int, str]:
    """id of every node -> the name of the outermost function it is in."""
    owner: dict[int, str] = {}
    for top in ast.walk(tree):
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(top):
                owner.setdefault(id(node), top.name)
    return owner


def spelled_names(source: str, names: dict[str, str]) -> list[tuple[int, str, str | None]]:
    """(line, name, enclosing function) for every string literal (f-string pieces included)
    in `source` that spells one of `names`; docstrings left out."""
    tree = ast.parse(source)
    docstrings, functions = _docstrings(tree), _functions(tree)
    patterns = {name: _pattern(name) for name in names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in docstrings:
            continue
        for name, pattern in patterns.items():
            if pattern.search(node.value):
                found.append((node.lineno, name, functions.get(id(node))))
    return sorted(found)


def scan() -> tuple[list[str], set[tuple[str, str]]]:
    """The literals in src/xfmr that spell a hunted name (`path:line: name`), and the entries
    of the exception table that excused one."""
    names = hunted_names()
    spelled, excused = [], set()
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if path == HOME:
            continue
        for line, name, function in spelled_names(path.read_text(encoding="utf-8"), names):
            for entry in ((module, name), (module, function)):
                if entry in NOT_THE_RUN_FILE:
                    excused.add(entry)
                    break
            else:
                spelled.append(f"src/xfmr/{module}:{line}: {name!r} (use {names[name]})")
    return spelled, excused


def test_run_file_names_are_spelled_only_in_run_dir_files() -> None:
    spelled, _ = scan()
    assert not spelled, "file names spelled outside xfmr.run_dir.files:\n" + "\n".join(spelled)


def test_every_exception_still_excuses_a_literal() -> None:
    """An entry left behind by a move, a rename or the switch to the constants would excuse
    the next literal there silently: remove it."""
    _, excused = scan()
    stale = NOT_THE_RUN_FILE.keys() - excused
    assert not stale, f"exceptions that excuse nothing: {sorted(stale)}"


def test_the_hunt_finds_literals_and_f_string_pieces_but_not_docstrings() -> None:
    source = '''
def save(run_dir, step):
    """Writes results.json and checkpoints/last.ckpt."""
    (run_dir / "results.json").write_text("{}")
    print(f"saved {run_dir}/checkpoints/step-{step}.ckpt")
    return run_dir / "checkpoints", "generation_config.json", "the best checkpoints"
'''
    names = {"results.json": "", "checkpoints": "", "config.json": "", "last.ckpt": ""}
    found = [(line, name) for line, name, _ in spelled_names(source, names)]
    assert found == [(4, "results.json"), (5, "checkpoints"), (6, "checkpoints")]


def test_the_callbacks_config_writes_the_checkpoints_the_names_say() -> None:
    callbacks = OmegaConf.load(config_dir() / "callbacks" / "default.yaml")
    best, periodic = callbacks.model_checkpoint, callbacks.periodic_checkpoint
    for checkpoint in (best, periodic):
        dirpath = OmegaConf.to_container(checkpoint, resolve=False)["dirpath"]
        assert dirpath.endswith("/" + run_files.CHECKPOINT_DIR), dirpath
    assert best.filename + run_files.CHECKPOINT_SUFFIX == run_files.BEST_CHECKPOINT
    assert best.save_last, "LAST_CHECKPOINT is written at every validation"
    written = periodic.filename.format(step=1234) + run_files.CHECKPOINT_SUFFIX
    assert fnmatch.fnmatch(written, run_files.PERIODIC_GLOB), written
    assert run_files.CHECKPOINT_NAMES == ("best", "last", "averaged")


def test_names_other_libraries_give_agree_with_theirs() -> None:
    from hydra.conf import HydraConf
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter
    from transformers.tokenization_utils_fast import TOKENIZER_FILE
    from transformers.utils import CONFIG_NAME

    last = ModelCheckpoint.CHECKPOINT_NAME_LAST + ModelCheckpoint.FILE_EXTENSION
    assert (last, ModelCheckpoint.FILE_EXTENSION) == (
        run_files.LAST_CHECKPOINT,
        run_files.CHECKPOINT_SUFFIX,
    )
    assert ExperimentWriter.NAME_METRICS_FILE == run_files.METRICS_FILE
    assert HydraConf.output_subdir == run_files.HYDRA_DIR
    assert (CONFIG_NAME, TOKENIZER_FILE) == (run_files.HF_CONFIG_FILE, run_files.HF_TOKENIZER_FILE)
