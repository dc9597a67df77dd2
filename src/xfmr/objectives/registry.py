"""Objectives and data groups by their config names, and what each declares, known without
importing torch: the run's config (`xfmr.config`) is checked with it before anything heavy loads.

The registry is the config tree itself: an objective is registered by its file
conf/objective/NAME.yaml, whose `_target_` is a class declaring `name`, `archs`, `reads`,
`segments` and `heads` (`xfmr.objectives.contract.Objective`); a data group's `_target_`
declares `gives`, the kind of examples it yields (`xfmr.kinds`). Declarations are read from the
source (`xfmr.declared`), so nothing else lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from xfmr.declared import declared
from xfmr.errors import UserError
from xfmr.paths import config_dir


@dataclass(frozen=True)
class ObjectiveFacts:
    """What an objective declares (see `xfmr.objectives.contract`)."""

    name: str
    archs: tuple[str, ...]
    reads: str
    segments: int = 0
    heads: tuple[str, ...] = ()
    packs: bool = False


def objective_facts(target: str) -> ObjectiveFacts:
    """The declarations of the objective class `target`; a UserError if it cannot be found or
    does not declare what every objective must."""
    facts = _declared("objective", target, ("name", "archs", "reads", "segments", "heads", "packs"))
    missing = [n for n in ("name", "archs", "reads") if n not in facts]
    if missing:
        raise UserError(
            f"objective._target_={target}: the class does not declare {missing} "
            "(see xfmr.objectives.contract.Objective)"
        )
    return ObjectiveFacts(**facts)


def data_gives(target: str) -> str | tuple[str, ...] | None:
    """The kind of examples the data group `target` gives, or the kinds its `data.kind` chooses
    from (a tuple); None if it does not say."""
    return _declared("data", target, ("gives",)).get("gives")


def _declared(group: str, target: str, names: tuple[str, ...]) -> dict[str, Any]:
    try:
        return declared(target, names)
    except (ImportError, AttributeError, ValueError):
        raise UserError(f"{group}._target_={target}: no such class or function") from None


@cache
def shipped(group: str) -> dict[str, str]:
    """{choice: _target_} of the group's config files shipped with xfmr (conf/GROUP/*.yaml)."""
    targets = {}
    for file in sorted((config_dir() / group).glob("*.yaml")):
        node = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        if isinstance(node, dict) and node.get("_target_"):
            targets[file.stem] = str(node["_target_"])
    return targets


def objectives() -> dict[str, ObjectiveFacts]:
    """The shipped objectives by config name."""
    return {choice: objective_facts(target) for choice, target in shipped("objective").items()}


def data_choices(kind: str) -> list[str]:
    """The shipped data groups that can give `kind`."""
    choices = []
    for choice, target in shipped("data").items():
        gives = data_gives(target)
        if gives == kind or (isinstance(gives, tuple) and kind in gives):
            choices.append(choice)
    return choices
