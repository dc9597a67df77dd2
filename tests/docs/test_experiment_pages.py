"""What an experiment page may claim is held to its script: every page under docs/experiments/
is listed in the section's README beside the script that writes it, names under its question the
tests that script makes (the script's TESTS, word for word), states its scope, ends with the
machine and its load, and shows each figure with a caption that the script wrote for it."""

from __future__ import annotations

import re

import pytest

from helpers import ROOT
from helpers.experiment_scripts import benchmark_script

PAGES = ROOT / "docs" / "experiments"
LISTED = re.compile(r"^\| .+ \| \[([\w-]+)\.md\]\(\1\.md\) \| `benchmarks/(experiment_\w+)\.py` \|$",
                    re.MULTILINE)  # fmt: skip
FIGURE = re.compile(r"^!\[([^\]]+)\]\(([\w-]+/[\w.-]+\.png)\)\n\n\*([^*]+)\*$", re.MULTILINE)


def listed() -> dict[str, str]:
    """page name -> script module, from the README's table."""
    return dict(LISTED.findall((PAGES / "README.md").read_text()))


def test_every_page_is_listed_with_its_script() -> None:
    pages = {path.stem for path in PAGES.glob("*.md")} - {"README"}
    assert set(listed()) == pages
    for script in listed().values():
        assert (ROOT / "benchmarks" / f"{script}.py").is_file(), script


@pytest.mark.parametrize("name", sorted(listed()))
def test_a_page_names_the_tests_its_script_makes(name: str) -> None:
    text = (PAGES / f"{name}.md").read_text()
    script = benchmark_script(listed()[name])
    lines = [line for line in text.splitlines() if line.startswith("**Tests:**")]
    assert lines == [f"**Tests:** {script.TESTS}"], f"{name}.md's Tests line is not its script's"
    # Under the question: the title, the question, then the tests, before any result.
    assert text.index("**Tests:**") < text.index("\n## ")


@pytest.mark.parametrize("name", sorted(listed()))
def test_a_page_states_its_scope_and_machine(name: str) -> None:
    text = (PAGES / f"{name}.md").read_text()
    assert "\n## Scope\n" in text, f"{name}.md has no Scope section"
    machine = text.split("\n## Machine and time\n", 1)
    assert len(machine) == 2, f"{name}.md has no Machine and time section"
    assert "load average" in machine[1] and "cores" in machine[1]
    assert "> Quick mode" not in text, f"{name}.md was written by a quick run"


@pytest.mark.parametrize("name", sorted(listed()))
def test_every_figure_is_drawn_and_captioned(name: str) -> None:
    text = (PAGES / f"{name}.md").read_text()
    figures = FIGURE.findall(text)
    assert len(figures) == text.count("!["), f"{name}.md shows a figure without its caption"
    for alt, path, caption in figures:
        assert alt == caption, path
        assert (PAGES / path).is_file(), path
        assert path.startswith(f"{name}/"), path
