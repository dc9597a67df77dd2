"""The code blocks of the docs (README.md and docs/**/*.md), read with markdown-it-py as the site
(MyST) and GitHub read them, and the marker each carries.

Every code block is a fenced block whose info string is `LANG MARKER`, with exactly one marker:

- `illustrative`: shown, not run (outputs, directory trees, commands that need real corpora, a
  GPU or a cluster);
- `run=ID`: a test reads the block with `block("ID")` (the ID a string literal, so that
  tests/docs/test_doc_blocks.py can find the call) and runs it; IDs are unique across the docs;
- `checked`: xfmr command lines, checked by tests/docs/test_doc_blocks.py (helpers.doc_commands).

An indented code block cannot carry a marker, so none is allowed. A test reads a block by its ID:

    from helpers.docs import block

    exec(block("from-python"), namespace)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from helpers import ROOT

ILLUSTRATIVE = "illustrative"
CHECKED = "checked"
RUN = "run="
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Languages a `checked` block may give: its lines are commands at a shell prompt.
SHELLS = ("bash", "console", "sh", "shell")
BUILD_DIR = "docs/_build"  # the site's output, not its source

# MyST directives (```{name} ...```) are no code blocks. Those holding Markdown (a note, a
# dropdown) are read for the code blocks inside; these hold none.
NOT_MARKDOWN = {"toctree", "eval-rst", "math", "raw", "include", "literalinclude", "mermaid",
                "graphviz", "csv-table", "image"}  # fmt: skip
# Directives that are code blocks, which cannot carry a marker: a plain fence must be used.
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode"}


class DocBlock(NamedTuple):
    """One code block: its file (relative to the repository for the docs), the line of its
    opening fence (1-based), its language and marker (the info string's first word and the rest),
    and its text. An indented block has `lang` None; a MyST code directive has `lang` "{name}"."""

    path: Path
    line: int
    lang: str | None
    marker: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def run_id(self) -> str | None:
        """ID of a `run=ID` block, else None."""
        return self.marker[len(RUN) :] if self.marker.startswith(RUN) else None


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown page under docs/ (not the built site), sorted."""
    pages = [p for p in (root / "docs").rglob("*.md") if not p.is_relative_to(root / BUILD_DIR)]
    return [root / "README.md", *sorted(pages)]


def blocks_of(text: str, path: Path) -> list[DocBlock]:
    """The code blocks of one Markdown text, named as in `path`."""
    return _blocks(text, path, offset=0)


def _blocks(text: str, path: Path, *, offset: int) -> list[DocBlock]:
    from markdown_it import MarkdownIt

    found = []
    for token in MarkdownIt("commonmark").enable("table").parse(text):
        line = offset + token.map[0] + 1 if token.map else offset
        if token.type == "code_block":
            found.append(DocBlock(path, line, None, "", token.content))
        elif token.type == "fence":
            lang, _, marker = token.info.strip().partition(" ")
            directive = re.fullmatch(r"\{([\w-]+)\}", lang)
            if directive and directive[1] not in CODE_DIRECTIVES:
                if directive[1] not in NOT_MARKDOWN:  # its body is Markdown, from the next line
                    found += _blocks(token.content, path, offset=line)
                continue
            found.append(DocBlock(path, line, lang, marker.strip(), token.content))
    return found


def doc_blocks(files: Iterable[Path] | None = None) -> Iterator[DocBlock]:
    """Every code block of `files` (default: the docs, `doc_files()`), in order."""
    if files is None:
        yield from _doc_blocks()
        return
    for file in files:
        yield from blocks_of(file.read_text(encoding="utf-8"), _shown(file))


@functools.cache
def _doc_blocks() -> tuple[DocBlock, ...]:
    return tuple(doc_blocks(doc_files()))


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def block(id: str) -> str:
    """The text of the docs' block marked `run=ID`; a LookupError if no block or several
    carry that marker."""
    found = [b for b in _doc_blocks() if b.run_id == id]
    if len(found) != 1:
        where = ", ".join(b.where for b in found) or "no block"
        raise LookupError(
            f"run={id} marks {where} in README.md and docs/**/*.md: exactly one block must carry it"
        )
    return found[0].text


def marker_problem(block: DocBlock) -> str | None:
    """Why a block breaks the docs' rules for code blocks, or None."""
    if block.lang is None:
        return "an indented code block cannot carry a marker: fence it as ```LANG MARKER"
    if block.lang.startswith("{"):
        return f"a {block.lang} directive cannot carry a marker: use a plain fence ```LANG MARKER"
    if not block.lang:
        return "no language: open the fence with ```LANG MARKER (e.g. ```console illustrative)"
    problem = _lexer_problem(block.lang)
    if problem:
        return problem
    words = block.marker.split()
    if len(words) != 1:
        shown = f"{len(words)} words ({block.marker!r})" if words else "no marker"
        return (
            f"{shown} after ```{block.lang}: give exactly one marker, {ILLUSTRATIVE}, "
            f"{CHECKED} or {RUN}ID"
        )
    [marker] = words
    if marker.startswith(RUN):
        if not RUN_ID.fullmatch(marker[len(RUN) :]):
            return f"{marker}: an ID is letters, digits, '-' and '_' (e.g. run=quick-start)"
        return None
    if marker == CHECKED and block.lang not in SHELLS:
        return (
            f"```{block.lang} {CHECKED}: a checked block holds command lines, ```LANG in {SHELLS}"
        )
    if marker not in (ILLUSTRATIVE, CHECKED):
        return f"marker {marker!r} is not {ILLUSTRATIVE}, {CHECKED} or {RUN}ID"
    return None


def _lexer_problem(lang: str) -> str | None:
    """The site highlights a block with the Pygments lexer its language names; a name Pygments
    does not know is a warning in the site's build."""
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        get_lexer_by_name(lang)
    except ClassNotFound:
        return f"language {lang!r} is not a Pygments lexer (e.g. console, python, yaml, text)"
    return None
