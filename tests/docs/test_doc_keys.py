"""Every config key and group choice the docs name, in prose, tables, illustrative command
lines, the commands' `--help` and the Python API's docstrings, exists as written (rules:
tests/helpers/doc_keys.py). The checked blocks are judged whole elsewhere
(tests/docs/test_doc_blocks.py)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from helpers.doc_commands import XFMR_COMMANDS
from helpers.doc_keys import (
    SHOWN_MISTAKES,
    Named,
    added_entries,
    named_in,
    page_texts,
    problem,
    shown,
)
from helpers.docs import doc_files


def _problems(named: list[Named], added: dict[str, str]) -> list[str]:
    found = []
    for name in named:
        why = problem(name, added)
        if why and not name.where.startswith(SHOWN_MISTAKES.get(name.text, ("-",))):
            found.append(f"{name.where}: {why}")
    return found


@pytest.mark.parametrize("path", doc_files(), ids=shown)
def test_every_key_and_choice_a_page_names_exists(path) -> None:
    added = added_entries(path.read_text())
    named = [n for line, text in page_texts(path) for n in named_in(text, f"{shown(path)}:{line}")]
    assert not _problems(named, added), "\n".join(_problems(named, added))


@pytest.mark.parametrize("command", [*XFMR_COMMANDS, "xfmr-data"])
def test_every_key_and_choice_a_help_text_names_exists(command: str) -> None:
    module = command.removeprefix("xfmr-")
    code = f"import sys; sys.argv = [{command!r}, '--help']; from xfmr.cli.{module} import main; main()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    named = list(named_in(out.stdout, f"{command} --help"))
    assert named or command in ("xfmr-average", "xfmr-compare"), "the help names keys"
    assert not _problems(named, {}), "\n".join(_problems(named, {}))


def test_every_key_the_api_docstrings_name_exists() -> None:
    import xfmr

    named = []
    for name in ("compose", "Experiment", "train", "open_run", "Run", "compare"):
        obj = getattr(xfmr, name)
        members = [obj, *(m for _, m in inspect.getmembers(obj) if callable(m))]
        for member in members:
            doc = inspect.getdoc(member) or ""
            named += named_in(doc, f"xfmr.{name}: {getattr(member, '__qualname__', name)}")
    assert named, "the docstrings name keys"
    assert not _problems(named, {}), "\n".join(_problems(named, {}))


def test_the_mistakes_pages_show_are_refused_and_real_keys_pass() -> None:
    for text in SHOWN_MISTAKES:
        (named,) = named_in(f"`{text}=5`", "shown")
        assert problem(named, {}), f"{text} is shown as a mistake but exists"
    fine = "`model.pos.max_distance` `data.train_path` `callbacks.text_sample.top_k` `pos=rotary`"
    assert not _problems(list(named_in(fine, "fine")), {})
    wrong = "`pos.max_distance` `model.sinusoid_scale` `data.train_paths` `pos=rotery`"
    assert len(_problems(list(named_in(wrong, "wrong")), {})) == 4
    added = added_entries("`+callbacks.profile._target_=xfmr.training.profiling.ProfileSteps`")
    assert not _problems(list(named_in("`callbacks.profile.steps=5`", "x")), added)
    assert _problems(list(named_in("`callbacks.profile.stepz=5`", "x")), added)
