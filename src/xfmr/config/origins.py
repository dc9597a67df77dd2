"""Where a value the person did not type came from: which config file of the composition set it
(an experiment, a size, an arch), so that a refusal of it says so. Hydra keeps no such record;
it is read back here from the files Hydra chose (`hydra.runtime.choices`), in the order of the
primary config's defaults list, each file's own defaults before it, its `# @package` header
deciding where its keys land. Only messages use it: a file it cannot place is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)", re.MULTILINE)
# The key a refusal names first: `data.block_size=...`, `model: d_model=...`, `objective=...`.
_KEY = re.compile(r"^(?:([a-z_]+): )?([A-Za-z_][\w.]*)(?:=| is | must )")
_SELF = "_self_"


@dataclass(frozen=True)
class Origins:
    """The keys given on the command line, and each chosen file's keys, in the order Hydra
    merged them (later files win)."""

    typed: frozenset[str] = frozenset()
    files: tuple[tuple[str, frozenset[str]], ...] = ()
    choices: Mapping[str, str] = field(default_factory=dict)

    def of(self, key: str) -> str | None:
        """Who set `key` (`experiment=bert_mlm`, `conf/train.yaml`), or None if the person
        typed it (or it, or a section above it, was given on the command line)."""
        parts = key.split(".")
        if any(".".join(parts[:n]) in self.typed for n in range(1, len(parts) + 1)):
            return None
        for label, keys in reversed(self.files):
            if key in keys:
                return label
        return None

    def explain(self, message: str) -> str:
        """`message`, a refusal, with where its first key's value came from when the person
        did not type it."""
        found = _KEY.match(message)
        if found is None:
            return message
        key = ".".join(p for p in found.groups() if p)
        origin = self.of(key)
        return f"{message} ({key} was set by {origin})" if origin else message


def origins(
    composed: Any, config_dirs: Sequence[Path], overrides: Iterable[str], primary: str = "train"
) -> Origins:
    """The origins of `composed`'s values: `overrides` are the command line's, the files are
    those `composed.hydra.runtime.choices` names, found in `config_dirs`."""
    choices = {str(k): str(v) for k, v in (composed.hydra.runtime.choices or {}).items() if v}
    typed = frozenset(_override_key(o) for o in overrides)
    files: list[tuple[str, frozenset[str]]] = []
    root = _find(config_dirs, f"{primary}.yaml")
    if root is not None:
        for entry in _defaults(root):
            files += _entry_files(entry, choices, config_dirs, root)
    return Origins(typed, tuple(files), choices)


def _override_key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].split("@", 1)[0].replace("/", ".")


def _entry_files(
    entry: Any, choices: Mapping[str, str], dirs: Sequence[Path], primary: Path
) -> list[tuple[str, frozenset[str]]]:
    """The files one entry of the primary defaults list merges, its own defaults first."""
    if entry == _SELF:
        return [(f"conf/{primary.name}", _keys(primary, ""))]
    if not isinstance(entry, Mapping) or len(entry) != 1:
        return []
    ((group, _),) = entry.items()
    group = str(group).removeprefix("optional ").strip()
    choice = choices.get(group)
    file = _find(dirs, f"{group}/{choice}.yaml") if choice else None
    return [] if file is None else _file_and_bases(file, group, f"{group}={choice}", dirs)


def _file_and_bases(
    file: Path, group: str, label: str, dirs: Sequence[Path]
) -> list[tuple[str, frozenset[str]]]:
    found = []
    for base in _defaults(file):
        if isinstance(base, str) and base != _SELF:  # `- default`: a file of the same group
            base_file = _find(dirs, f"{group}/{base}.yaml")
            if base_file is not None:
                found += _file_and_bases(base_file, group, label, dirs)
    return [*found, (label, _keys(file, group.replace("/", ".")))]


def _find(dirs: Sequence[Path], name: str) -> Path | None:
    for root in reversed(list(dirs)):  # a directory of the person's own first
        if (root / name).is_file():
            return root / name
    return None


def _defaults(file: Path) -> list[Any]:
    node = _load(file)
    return list(node.get("defaults") or []) if isinstance(node, dict) else []


def _keys(file: Path, group_package: str) -> frozenset[str]:
    """Every dotted key `file` sets, under its package."""
    text = file.read_text(encoding="utf-8")
    header = _PACKAGE.search(text)
    package = header.group(1) if header else group_package
    prefix = "" if package == "_global_" else package.replace("_group_", group_package)
    node = _load(file)
    body = {k: v for k, v in node.items() if k != "defaults"} if isinstance(node, dict) else {}
    return frozenset(_flat(body, f"{prefix}." if prefix else ""))


def _flat(node: Mapping[str, Any], prefix: str) -> list[str]:
    keys = []
    for key, value in node.items():
        keys.append(f"{prefix}{key}")
        if isinstance(value, Mapping):
            keys += _flat(value, f"{prefix}{key}.")
    return keys


def _load(file: Path) -> Any:
    try:
        return yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
