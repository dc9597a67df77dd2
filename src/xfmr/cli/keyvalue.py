"""`key=value` entry points that use a trained run (xfmr-generate, xfmr-eval, xfmr-average,
xfmr-attention): arguments composed through Hydra's compose API against conf/NAME.yaml (group
choices and unknown keys checked as for xfmr-train, no output directory made), `--help` from
the config files themselves, and `generation.*` checked before torch loads."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from xfmr.cli.common import fail
from xfmr.generation.config import generation_settings
from xfmr.paths import config_dir

__all__ = ["EntryPoint", "generation_settings", "parse_args", "progress"]


@dataclass(frozen=True)
class EntryPoint:
    """How one entry point reads its arguments.

    Args:
        prog: the command's name, in messages.
        config_name: its primary config, conf/CONFIG_NAME.yaml.
        summary: one line for --help.
        examples: command lines for --help.
        groups: the config groups it composes (conf/GROUP/*.yaml).
        text_keys: free-text keys taken verbatim, outside Hydra's override grammar (`input=`
            may hold commas, brackets and quotes).
        open_sections: sections whose keys are the run's own (xfmr-eval's `data.*`), checked
            against the run's config instead of conf/CONFIG_NAME.yaml.
    """

    prog: str
    config_name: str
    summary: str
    examples: tuple[str, ...]
    groups: tuple[str, ...] = ()
    text_keys: tuple[str, ...] = ()
    open_sections: tuple[str, ...] = ()


def parse_args(entry: EntryPoint, argv: list[str]) -> DictConfig:
    """The composed config for `argv`; --help prints and exits 0, a mistake fails in one line."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(help_text(entry))
        sys.exit(0)
    texts: dict[str, str] = {}
    overrides: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            fail(entry.prog, f"{arg!r} is not KEY=VALUE; `{entry.prog} --help` lists the keys")
        if key in entry.text_keys:
            texts[key] = value
        elif key.split(".")[0] in entry.open_sections and "." in key:
            overrides.append(f"+{arg}")  # the section is empty here: the run's keys join it
        else:
            check_group_choice(entry, key, value)
            overrides.append(arg)
    cfg = _compose(entry, overrides)
    with open_dict(cfg):
        for key, value in texts.items():
            cfg[key] = value
    return cfg


def check_group_choice(entry: EntryPoint, key: str, value: str) -> None:
    if key not in entry.groups:
        return
    from xfmr.api.choices import group_choices, not_a_choice

    choices = group_choices(key, [config_dir()])
    if value not in choices:
        fail(entry.prog, not_a_choice(key, value, choices))


def _compose(entry: EntryPoint, overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose(config_name=entry.config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        fail(entry.prog, _one_line(entry, str(e)))


def _one_line(entry: EntryPoint, message: str) -> str:
    """Hydra's multi-line complaint about an override as one line a person can act on."""
    first = message.strip().splitlines()[0] if message.strip() else message
    if first.startswith("Could not override '"):
        key = first.split("'")[1]
        return f"{key} is not a key of {entry.prog}; valid: {', '.join(near_keys(entry, key))}"
    if "mismatched input" in first or "token recognition error" in first:
        return f"could not parse an argument ({first}): quote values with brackets or commas"
    return first


def near_keys(entry: EntryPoint, key: str) -> list[str]:
    """The keys of `key`'s section (generation.*), else the top-level keys with each section
    shown as SECTION.*."""
    keys = known_keys(entry)
    section = key.rpartition(".")[0]
    inside = [k for k in keys if section and k.startswith(f"{section}.")]
    if inside:
        return inside
    return sorted({k if "." not in k else f"{k.split('.')[0]}.*" for k in keys})


def known_keys(entry: EntryPoint) -> list[str]:
    """The dotted keys of the entry's default config (group keys included)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name=entry.config_name)
    return sorted(_dotted(OmegaConf.to_container(cfg, resolve=False)))


def _dotted(values: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            keys += _dotted(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def help_text(entry: EntryPoint) -> str:
    """Usage, the groups and their choices, and the config files with their comments."""
    conf = config_dir()
    lines = [f"{entry.prog}: {entry.summary}", "", f"Usage: {entry.prog} KEY=VALUE ...", ""]
    primary = (conf / f"{entry.config_name}.yaml").read_text().splitlines()
    defaults = _group_defaults(primary)
    if entry.groups:
        lines.append("Config groups (GROUP=CHOICE, then GROUP.KEY=VALUE):")
        for group in entry.groups:
            choices = sorted(p.stem for p in (conf / group).glob("*.yaml"))
            lines.append(f"  {group}: {', '.join(choices)} (default: {defaults.get(group)})")
        lines.append("")
    lines.append(f"Keys and their defaults (conf/{entry.config_name}.yaml):")
    lines += [f"  {line}" for line in _without_defaults_list(primary)]
    for group in entry.groups:
        lines += ["", f"{group}.* keys (conf/{group}/{defaults.get(group)}.yaml):"]
        text = (conf / group / f"{defaults.get(group)}.yaml").read_text().splitlines()
        lines += [f"  {group}.{line}" if line[:1].isalpha() else f"  {line}" for line in text]
        for path in sorted((conf / group).glob("*.yaml")):
            if path.stem != defaults.get(group):
                values = [
                    v.split("#")[0].strip()
                    for v in _without_defaults_list(path.read_text().splitlines())
                    if v[:1].isalpha()
                ]
                lines.append(f"  {group}={path.stem} sets: {', '.join(values)}")
    lines += ["", "Examples:", *(f"  {example}" for example in entry.examples)]
    return "\n".join(lines)


def _group_defaults(lines: list[str]) -> dict[str, str]:
    defaults = {}
    for line in lines:
        item = line.strip().removeprefix("- ")
        if line.startswith("  - ") and ":" in item:
            group, _, choice = item.partition(":")
            defaults[group.strip()] = choice.split("#")[0].strip()
    return defaults


def _without_defaults_list(lines: list[str]) -> list[str]:
    kept, skipping = [], False
    for line in lines:
        if line.startswith("defaults:"):
            skipping = True
            continue
        if skipping and line.startswith("  "):
            continue
        skipping = False
        if not line.startswith("# @package"):
            kept.append(line)
    return kept


def log_to_stderr() -> None:
    """The library's `xfmr` log lines on stderr, bare (stdout carries the outputs)."""
    logger = logging.getLogger("xfmr")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


@contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for `total` items; yields `advance(n)`."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.advance(task, done)
