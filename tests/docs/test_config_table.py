"""docs/config.md's "Config groups" table says what conf/ holds: every group is a row, each row
lists every choice of its group and no other, and its default is the one the commands start
from (conf/train.yaml's defaults list; the generation group's, conf/generate.yaml's, which
xfmr-eval's and xfmr-attention's share). So a choice added, renamed or made the default in
conf/ fails here until the table follows."""

from __future__ import annotations

import re
from typing import NamedTuple

import yaml

from helpers import ROOT
from xfmr.paths import config_dir

CONF = config_dir()
PAGE = ROOT / "docs" / "config.md"
HEADING = "Config groups"
NONE = "none"  # the table's word for a group a run leaves unchosen (`GROUP: null`)
# The primary configs whose defaults list chooses each group; the first to name it decides.
PRIMARY = ("train.yaml", "generate.yaml")
# Commands that decode share generate.yaml's choice of the generation group.
DECODERS = ("eval.yaml", "attention.yaml")


class Row(NamedTuple):
    line: int
    groups: tuple[str, ...]
    choices: tuple[str, ...]
    default: str


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def table_rows(text: str) -> list[Row]:
    """The rows of the table under the heading `## Config groups` in a Markdown text: its
    group, choices and default columns, read as the code spans each holds."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    start = next(
        i + 1
        for i, t in enumerate(tokens)
        if t.type == "heading_open" and tokens[i + 1].content == HEADING
    )
    rows, cells, line, in_table = [], [], 0, False
    for token in tokens[start:]:
        if token.type == "heading_open":
            break
        if token.type == "table_open":
            in_table = True
        elif token.type == "table_close" and in_table:
            break
        elif token.type == "tr_open":
            cells, line = [], token.map[0] + 1 if token.map else 0
        elif token.type == "inline" and in_table:
            cells.append(token.content)
        elif token.type == "tr_close" and cells[0] != "group":
            default = code_spans(cells[2]) or [cells[2].strip()]
            rows.append(
                Row(line, tuple(code_spans(cells[0])), tuple(code_spans(cells[1])), default[0])
            )
    return rows


def conf_groups() -> dict[str, set[str]]:
    """Each config group (a folder of conf/ holding YAML files) and its choices. Hydra's help
    template (conf/hydra/help/) is Hydra's, no group a run chooses from."""
    return {
        folder.name: {path.stem for path in folder.glob("*.yaml")}
        for folder in CONF.iterdir()
        if folder.is_dir() and any(folder.glob("*.yaml"))
    }


def defaults_of(primary: str) -> dict[str, str]:
    """The choice a primary config's defaults list makes for each group (`optional GROUP`
    read as GROUP; null as NONE)."""
    chosen = {}
    for entry in yaml.safe_load((CONF / primary).read_text())["defaults"]:
        if isinstance(entry, dict):
            ((key, value),) = entry.items()
            chosen[key.removeprefix("optional ").strip()] = NONE if value is None else value
    return chosen


def default_choices() -> dict[str, str]:
    chosen: dict[str, str] = {}
    for primary in PRIMARY:
        chosen = {**defaults_of(primary), **chosen}
    return chosen


def problems(rows: list[Row]) -> list[str]:
    """Where the table and conf/ disagree, one line each."""
    groups, defaults = conf_groups(), default_choices()
    found = [
        p for row in rows for group in row.groups for p in _problems(row, group, groups, defaults)
    ]
    listed = {group for row in rows for group in row.groups}
    missing = sorted(set(groups) - listed)
    return found + [f"docs/config.md: no row for the group {g!r} (conf/{g}/)" for g in missing]


def _problems(
    row: Row, group: str, groups: dict[str, set[str]], defaults: dict[str, str]
) -> list[str]:
    where = f"docs/config.md:{row.line}: {group}"
    if group not in groups:
        return [f"{where}: no folder conf/{group}/"]
    found = []
    if set(row.choices) != groups[group] or len(row.choices) != len(set(row.choices)):
        found.append(
            f"{where}: lists {list(row.choices)}, conf/{group}/ holds {sorted(groups[group])}"
        )
    expected = defaults.get(group, NONE)
    if row.default != expected:
        found.append(f"{where}: default {row.default!r}, the defaults list says {expected!r}")
    return found


def test_the_table_holds_every_group_its_choices_and_its_default() -> None:
    rows = table_rows(PAGE.read_text(encoding="utf-8"))
    assert len(rows) >= 10, rows
    assert not problems(rows), "\n".join(problems(rows))


def test_the_defaults_are_those_the_commands_start_from() -> None:
    """A few written out by hand, so that the reading of the defaults lists is tested too."""
    defaults = default_choices()
    assert defaults["pos"] == "learned" and defaults["arch"] == "decoder"
    assert defaults["experiment"] == defaults["hparams_search"] == defaults["debug"] == NONE
    assert defaults["generation"] == "greedy"
    for primary in DECODERS:
        assert defaults_of(primary)["generation"] == defaults["generation"], primary


def drifted(text: str, old: str, new: str) -> list[str]:
    assert old in text, old
    return problems(table_rows(text.replace(old, new, 1)))


def test_a_table_that_drifts_from_conf_is_caught() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert any("no folder conf/shape/" in p for p in drifted(text, "| `size` |", "| `shape` |"))
    assert any(
        "no row for the group 'size'" in p for p in drifted(text, "| `size` |", "| `shape` |")
    )
    missing = drifted(text, "`tiny`, `small`, `base`", "`tiny`, `small`")
    assert any("size: lists" in p for p in missing), missing
    extra = drifted(text, "`tiny`, `small`, `base`", "`tiny`, `small`, `base`, `huge`")
    assert any("size: lists" in p for p in extra), extra
    default = drifted(text, "`tiny`, `small`, `base` | `small`", "`tiny`, `small`, `base` | `tiny`")
    assert any("size: default 'tiny'" in p for p in default), default
    unchosen = drifted(text, "| `nanogpt_lr` | none |", "| `nanogpt_lr` | `nanogpt_lr` |")
    assert any("hparams_search: default" in p for p in unchosen), unchosen
