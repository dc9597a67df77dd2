"""A figure about the test suite (how long it takes, how many tests, its coverage) is stated
once, in docs/benchmarks.md's "The test suite" with the machine and the command; every other
page links there. Two pages that each stated it drifted apart (15 min, 15 min 36 s and 8 min 39 s
on three pages at once)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.docs import doc_files

HOME = ROOT / "docs" / "benchmarks.md"
ABOUT_THE_SUITE = re.compile(
    r"make (test|test-fast|coverage)\b|\b(the|test) suite\b|\bthe tests\b|\bcoverage of src", re.I
)
A_FIGURE = re.compile(
    r"\b\d+(\.\d+)?\s*(min|minutes|s|seconds)\b|\bcoverage\b.*\d%|\d%.*\bcoverage\b"
    r"|\b\d[\d,]* (tests|passed)\b"
)


def _sentences(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a page: each sentence of its prose and tables, each line of its code."""
    from markdown_it import MarkdownIt

    found = []
    for token in MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8")):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "inline":
            found += [(line, part) for part in re.split(r"(?<=[.!?])\s+", token.content)]
        elif token.type in ("fence", "code_block"):
            found += [(line + i + 1, text) for i, text in enumerate(token.content.splitlines())]
    return found


def statements(path: Path) -> list[str]:
    """The sentences (and code lines) of a page that state a figure about the suite."""
    return [
        f"{path.name}:{line}: {' '.join(text.split())[:120]}"
        for line, text in _sentences(path)
        if ABOUT_THE_SUITE.search(text) and A_FIGURE.search(text)
    ]


@pytest.mark.parametrize("path", [p for p in doc_files() if p != HOME], ids=lambda p: p.name)
def test_only_the_benchmarks_page_states_the_suites_figures(path: Path) -> None:
    found = statements(path)
    assert not found, "link to docs/benchmarks.md#the-test-suite instead:\n" + "\n".join(found)


def test_the_benchmarks_page_states_them(tmp_path: Path) -> None:
    assert statements(HOME), "docs/benchmarks.md states the suite's time"
    page = tmp_path / "page.md"
    page.write_text("Install.\n\n`make test` runs them all (about 15 min on 2 cores).\n")
    assert len(statements(page)) == 1
