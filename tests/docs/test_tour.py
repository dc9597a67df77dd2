"""docs/getting-started.md's tour holds together: each command works on what an earlier one
made (the comparison reads the sweep's folder, the export reads the first run, the Python loads
the export's folder), and its export and Python, run as written on a tiny run, load the model
with transformers and continue the prompt. Each xfmr command is also judged on its own, as a
`checked` block, by tests/docs/test_doc_blocks.py; the suite's figures live in
docs/benchmarks.md (tests/docs/test_figures_once.py)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.doc_commands import command_lines
from helpers.docs import CHECKED, block, doc_blocks

PAGE = ROOT / "docs" / "getting-started.md"
FIRST_RUN = "outputs/train/runs/DATE_TIME"  # the placeholder for the run `xfmr-train` made
STEPS = (
    "1. Install",
    "2. A first run",
    "3. Change it",
    "4. A sweep",
    "5. A comparison",
    "6. An export",
)


def tour_commands() -> list[list[str]]:
    """The words of every command of the page's checked blocks, in the page's order."""
    return [
        shlex.split(line)
        for b in doc_blocks([PAGE])
        if b.marker == CHECKED
        for _, line in command_lines(b.text)
    ]


def named(command: list[str], key: str) -> str | None:
    return next((w.split("=", 1)[1] for w in command if w.startswith(f"{key}=")), None)


def test_the_tour_has_its_steps_in_order_each_with_a_time() -> None:
    text = PAGE.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    tour = [next(h for h in headings if h.startswith(step)) for step in STEPS]
    assert [headings.index(h) for h in tour] == sorted(headings.index(h) for h in tour)
    table = text[: text.index("## 1. Install")]
    assert all(f"[{step}" in table for step in STEPS), "the table at the top names each step"
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) == len(STEPS) and all(re.search(r"min|second", r) for r in rows), rows


def test_each_command_uses_what_an_earlier_one_made() -> None:
    commands = tour_commands()
    swept = {named(c, "hydra.sweep.dir") for c in commands if "-m" in c}
    compared = [c[1] for c in commands if c[0] == "xfmr-compare"]
    assert compared and all(folder in swept for folder in compared), (compared, swept)
    exports = [c for c in commands if c[0] == "xfmr-export"]
    assert [named(c, "run_dir") for c in exports] == [FIRST_RUN], exports
    assert named(exports[0], "format") == "hf"
    loaded = re.findall(r'from_pretrained\("([^"]+)"\)', block("tour-load-hf"))
    assert loaded and set(loaded) == {named(exports[0], "out")}, loaded


@pytest.mark.slow  # the shared tiny run exported and loaded with transformers: a few seconds
def test_the_tours_export_and_python_load_and_continue_the_prompt(
    tiny_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.cli import run_cli

    monkeypatch.chdir(tmp_path)
    tiny_run.copy(tmp_path / FIRST_RUN)  # a finished run where the tour's first run would be
    [export] = [c for c in tour_commands() if c[0] == "xfmr-export"]
    result = run_cli(export[1:], tmp_path, module="xfmr.cli.export")
    assert result.returncode == 0, result.output
    assert "as GPT2LMHeadModel" in result.stdout, result.stdout
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block("tour-load-hf"), str(PAGE), "exec"), {})
    assert printed.getvalue().startswith("the cat"), printed.getvalue()
