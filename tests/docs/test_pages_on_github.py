"""The docs read on GitHub too, where MyST's directives show as raw text:

- docs/index.md's toctrees are hidden, so "Every page" lists the pages in plain Markdown,
  grouped as the toctrees are: each group (a bold item) names the same pages, in the same order,
  as the toctree of that caption, and every page under docs/ is in both;
- docs/api.md is autodoc directives, so its opening lists the entry points in plain Markdown,
  and each name it lists is one Python resolves."""

from __future__ import annotations

import importlib
import re

from helpers import ROOT
from helpers.docs import BUILD_DIR

DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
LIST_HEADING = "## Every page"
GROUP = re.compile(r"^- \*\*(?P<caption>[^*]+)\*\*\s*$")
PAGE = re.compile(r"^\s+- \[[^\]]+\]\((?P<page>[^)#]+)\.md\)")


def pages() -> set[str]:
    """Every page under docs/ but the home page, as a toctree names it (no .md)."""
    found = DOCS.rglob("*.md")
    return {
        p.relative_to(DOCS).with_suffix("").as_posix()
        for p in found
        if not p.is_relative_to(ROOT / BUILD_DIR)
    } - {"index"}


def toctrees(text: str) -> dict[str, list[str]]:
    """Each toctree's caption and the pages it names, a `:glob:` pattern expanded as Sphinx
    expands it: sorted, `*` within one folder, a page named earlier not again."""
    found = {}
    for body in re.findall(r"^```\{toctree\}\n(.*?)^```", text, re.M | re.S):
        lines = [line.strip() for line in body.splitlines()]
        options = dict(line[1:].partition(":")[::2] for line in lines if line.startswith(":"))
        named: list[str] = []
        for entry in (line for line in lines if line and not line.startswith(":")):
            pattern = re.escape(entry).replace(r"\*", "[^/]*")
            matched = sorted(p for p in pages() if re.fullmatch(pattern, p))
            named += [p for p in (matched if "*" in entry else [entry]) if p not in named]
        found[options["caption"].strip()] = named
    return found


def listed(text: str) -> dict[str, list[str]]:
    """The groups of the "Every page" list and the pages each links to."""
    found: dict[str, list[str]] = {}
    body = text[text.index(LIST_HEADING) + len(LIST_HEADING) :].split("\n## ", 1)[0]
    caption = None
    for line in body.splitlines():
        if group := GROUP.match(line):
            caption = group["caption"]
            found[caption] = []
        elif (page := PAGE.match(line)) and caption is not None:
            found[caption].append(page["page"])
    return found


def disagreements(text: str) -> list[str]:
    """Where the home page's list and its toctrees disagree, or leave a page out."""
    trees, written = toctrees(text), listed(text)
    found = []
    if list(trees) != list(written):
        found.append(f"the list's groups {list(written)} are not the toctrees' {list(trees)}")
    for caption in trees.keys() & written.keys():
        if trees[caption] != written[caption]:  # in the sidebar's order
            found.append(
                f"{caption}: the toctree names {trees[caption]}, the list {written[caption]}"
            )
    for where, named in (("a toctree", trees), ("the list", written)):
        every = {page for group in named.values() for page in group}
        found += [f"docs/{p}.md is not in {where}" for p in sorted(pages() - every)]
        found += [f"{where} names docs/{p}.md, which is not there" for p in sorted(every - pages())]
    return found


def test_the_home_pages_list_and_toctrees_name_every_page_alike() -> None:
    text = INDEX.read_text(encoding="utf-8")
    assert len(listed(text)) >= 5 and "Start" in listed(text), listed(text)
    assert not disagreements(text), "\n".join(disagreements(text))


def test_a_page_left_out_of_either_is_caught() -> None:
    text = INDEX.read_text(encoding="utf-8")
    unlisted = "\n".join(
        line for line in text.splitlines() if not line.startswith("  - [Troubleshooting]")
    )
    assert any("troubleshooting.md is not in the list" in p for p in disagreements(unlisted))
    untreed = text.replace("\ntroubleshooting\n", "\n")
    assert any("troubleshooting.md is not in a toctree" in p for p in disagreements(untreed))
    moved = text.replace("\ntroubleshooting\n", "\n").replace("\napi\n", "\napi\ntroubleshooting\n")
    assert any(p.startswith(("Start", "Reference")) for p in disagreements(moved))


def test_the_api_pages_opening_lists_names_that_exist() -> None:
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    opening = text[: text.index("```")]
    names = re.findall(r"`(xfmr(?:\.\w+)+)(?:\([^`]*\))?`", opening)
    assert {"xfmr.compose", "xfmr.train", "xfmr.open_run", "xfmr.Run", "xfmr.compare"} <= set(names)
    for name in names:
        resolve(name)


def resolve(name: str) -> object:
    """The object a dotted name names: the longest module prefix imported, the rest attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(name)
