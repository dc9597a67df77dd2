"""The config keys (`model.d_model`, `data.train_path`) and group choices (`pos=rotary`) that the
docs and the commands' help texts name in prose, tables and illustrative command lines, and
whether each exists as written. The `checked` blocks are judged whole by
tests/helpers/doc_commands.py; this reads everything else, so a key renamed in the code fails a
test until every sentence that names it follows.

What exists:

- a group choice: a file conf/GROUP/CHOICE.yaml (a comma list: each of them);
- `model.KEY`: a field of ModelConfig (`model.pos.KEY`: of PosConfig), as the config check
  reads them;
- `SECTION.KEY` of another section (data, objective, optim, ...): a key some choice of the
  section's group sets, or a keyword of a class some choice names (`_target_`, read from its
  source as the config check reads it), or a key of conf/train.yaml's own sections
  (throughput, nonfinite, finetune, slurm);
- `logger.ENTRY.KEY`, `callbacks.ENTRY.KEY`: the entry's key or its class's keyword; an entry
  the same page adds (`+callbacks.NAME._target_=CLASS`) takes CLASS's keywords.

`pos.KEY`, `arch.KEY` and `size.KEY` name no key: those groups set keys under `model`.
Hydra's own keys (`hydra.*`) are not read here: the checked blocks hold the sweeper's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from helpers import ROOT
from xfmr.nn.config import field_named
from xfmr.paths import config_dir
from xfmr.targets import parameters

CONF = config_dir()
# Sections a run's config holds beside the groups' (conf/train.yaml's own).
OWN_SECTIONS = ("throughput", "nonfinite", "finetune", "slurm")
# Groups whose choices set keys under `model`: they are no section of their own.
MODEL_GROUPS = ("pos", "arch", "size")
# Names a file or a host has, not a key (`model.safetensors`, `tokenizer.json`, `data.deepai.org`).
FILE_SUFFIXES = ("safetensors", "json", "yaml", "ckpt", "txt", "csv", "png", "py", "md", "tsv",
                 "html", "ipynb", "log", "org", "com", "io", "net", "edu")  # fmt: skip
# Choices a page defines itself, in a config folder of the reader's own.
# Mistakes a page shows on purpose, beside the refusal xfmr gives (each must still be refused).
SHOWN_MISTAKES = {
    "trainer.max_step": ("docs/config.md", "docs/reliability.md"),
    "optim.lrr": ("docs/config.md", "docs/troubleshooting.md"),
    "model.d_modle": ("docs/reliability.md",),
    "pos=rotry": ("docs/reliability.md", "docs/troubleshooting.md"),
    "pos=rotaryy": ("docs/benchmarks.md",),
    "pos.rotary_base": ("docs/architectures.md",),  # the spelling from before positions moved
}
OWN_CHOICES = {
    "experiment=mine": "docs/config.md: an experiment of your own, in --config-dir",
    "objective=smoothed_clm": "docs/objectives.md: the objective the page adds",
}


class Named(NamedTuple):
    """A key (`data.path`) or a group's choice (`pos=rotary`) as a page names it, and where."""

    where: str
    text: str
    head: str  # the section or group
    rest: str  # the key under it, or the choice
    choice: bool


def groups() -> dict[str, set[str]]:
    """Each config group and its choices (conf/GROUP/*.yaml, subfolders as GROUP/SUB)."""
    found: dict[str, set[str]] = {}
    for path in CONF.rglob("*.yaml"):
        if path.parent != CONF:
            found.setdefault(path.parent.relative_to(CONF).as_posix(), set()).add(path.stem)
    return found


def _heads() -> str:
    names = {*groups(), *OWN_SECTIONS, "model", "generation"} - {"hydra", "experiment"}
    return "|".join(sorted((re.escape(n) for n in names), key=len, reverse=True))


DOTTED = re.compile(rf"(?<![\w./$+-])\+?({_heads()})\.([A-Za-z_][\w.]*[\w])(?:=(\S+))?")
CHOICE = re.compile(rf"(?<![\w./$-])\+?({_heads()}|experiment)=([\w,./-]++)(?!\()")


def problem(name: Named, added: dict[str, str]) -> str | None:
    """Why the key or choice `name` does not exist as written, or None. `added`: the entries
    (`callbacks.NAME`) its page adds, each with the class it names."""
    if name.choice:
        return _choice_problem(name.head, name.rest, name.text)
    section, key = name.head, name.rest
    if key.split(".")[0].isupper() or key.rsplit(".", 1)[-1] in FILE_SUFFIXES:
        return None  # a placeholder (`model.KEY`), a file's name
    if section in MODEL_GROUPS:
        return f"`{section}.{key}`: {section}= is a group, its keys are under model (model.{section}.{key}?)"
    if section == "model":
        return None if field_named(key) is not None else f"`model.{key}` is not a model key"
    return _section_problem(section, key, added)


def _choice_problem(group: str, value: str, text: str) -> str | None:
    if text in OWN_CHOICES or value.isupper() or value in ("null", "..."):
        return None
    choices = groups().get(group)
    if choices is None:
        return None  # a key of a section that is no group (`seed=1`)
    listed = value.split(",")
    # A baseline of several settings goes on with a key: `pos=learned,model.n_layers=4`.
    listed = listed[: next((i for i, v in enumerate(listed) if "." in v), len(listed))]
    wrong = [v for v in listed if v and not v.isupper() and v not in choices]
    return f"`{text}`: no {group}={wrong[0]} (choices: {sorted(choices)})" if wrong else None


def _section_problem(section: str, key: str, added: dict[str, str]) -> str | None:
    if section in ("logger", "callbacks"):
        entry, _, rest = key.partition(".")
        target = added.get(f"{section}.{entry}")
        known = entries(section)
        if target is None and entry not in known:
            return f"`{section}.{key}`: no {section} entry {entry!r} (entries: {sorted(known)})"
        if not rest or rest == "_target_":
            return None
        keys = set(parameters(target) or ()) if target else known[entry]
        return None if rest in keys else f"`{section}.{key}`: {entry} takes no {rest!r}"
    keys = section_keys(section)
    first = key.split(".")[0]
    return None if first in keys else f"`{section}.{key}` is not a {section} key"


@functools.cache
def section_keys(section: str) -> frozenset[str]:
    """Every key a choice of the section's group sets, or a class it names takes."""
    if section in OWN_SECTIONS:
        own = yaml.safe_load((CONF / "train.yaml").read_text())[section]
        return frozenset(own)
    keys: set[str] = set()
    for path in (CONF / section).glob("*.yaml"):
        values = _section_values(path, section)
        keys |= set(values) - {"_target_", "_partial_", "defaults"}
        if isinstance(values.get("_target_"), str):
            keys |= set(parameters(values["_target_"]) or ())
    return frozenset(keys)


@functools.cache
def entries(section: str) -> dict[str, frozenset[str]]:
    """The named entries of `logger` or `callbacks` that a choice ships, each with its keys."""
    found: dict[str, set[str]] = {}
    for path in (CONF / section).glob("*.yaml"):
        for name, values in _section_values(path, section).items():
            if isinstance(values, dict):
                target = values.get("_target_")
                params = set(parameters(target) or ()) if isinstance(target, str) else set()
                found.setdefault(name, set()).update(set(values) | params)
    return {name: frozenset(keys) for name, keys in found.items()}


def _section_values(path: Path, section: str) -> dict[str, Any]:
    """The keys a group file sets in its section (`# @package` lines aside)."""
    values = yaml.safe_load(path.read_text()) or {}
    return values.get(section, values) if section in values else values


def named_in(text: str, where: str) -> Iterator[Named]:
    """Every key and group choice named in `text`."""
    for pattern in (DOTTED, CHOICE):
        for match in pattern.finditer(text):
            rest = match[2].rstrip(".,")
            shown_as = f"{match[1]}{'=' if pattern is CHOICE else '.'}{rest}"
            yield Named(where, shown_as, match[1], rest, pattern is CHOICE)


def added_entries(text: str) -> dict[str, str]:
    """The logger and callbacks entries a text adds: `+callbacks.NAME._target_=CLASS`."""
    pattern = r"\+?((?:callbacks|logger)\.\w+)\._target_=([\w.]+)"
    return {m[1]: m[2] for m in re.finditer(pattern, text)}


def page_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of a Markdown page's prose, inline code and illustrative command blocks:
    what a reader copies that no test runs."""
    from markdown_it import MarkdownIt

    for token in MarkdownIt("commonmark").enable("table").parse(path.read_text()):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "inline":
            yield line, " ".join(c.content for c in token.children or [] if c.content)
        elif token.type == "fence" and token.info.split()[:2][-1:] == ["illustrative"]:
            if token.info.split()[0] in ("bash", "console", "sh", "shell", "text"):
                yield line, token.content


def shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
