"""Hand-kept tables of config keys name keys the config has: a key renamed in conf/ (or in the
constructor it feeds) while a table keeps the old name fails here, where the table would skip it
in silence (`check_numbers` passes over a key the composed config lacks).

A dotted key lives in the config when an option of its group holds it (any of conf/GROUP/*.yaml;
train.yaml for keys outside a group), or when it is an argument of a `_target_` on its path
there (`+trainer.limit_train_batches=0.5` adds one Lightning takes). The model's keys (model.*,
pos.*) are `ModelConfig`'s and are left to it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_object
from omegaconf import OmegaConf

from helpers.config import signature_defaults
from xfmr.api.choices import OTHER_TOOLS_GROUPS
from xfmr.cli.train import _TREE_ORDER
from xfmr.config.make import SECTIONS
from xfmr.config.run import number_tables
from xfmr.paths import config_dir

# Every section's numeric keys by their dotted name (each section declares its table).
NUMERIC_KEYS = {
    f"{section}.{key}" if section else key: forms
    for section, table in number_tables().items()
    for key, forms in table.items()
}

MODEL_SECTIONS = {"model"}  # ModelConfig's keys: tests/conf/test_model_keys.py
# Keys a table lists for configs of a person's own, with what takes them.
NOT_SHIPPED: dict[str, str] = {}
_KEY_IN_TEXT = re.compile(r"\b([a-z_]+(?:\.[a-z_]+)+)\b")


def _yaml(path: Path) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


@cache
def _options(group: str) -> tuple[dict[str, Any], ...]:
    """Every option of `group`, as written; for a key outside any group, train.yaml."""
    files = sorted((config_dir() / group).glob("*.yaml")) or [config_dir() / "train.yaml"]
    return tuple(_yaml(f) for f in files)


def lives(key: str) -> bool:
    group, _, rest = key.partition(".")
    if not (config_dir() / group).is_dir():
        rest = key
    return any(_holds(option, rest.split(".")) for option in _options(group))


def _holds(tree: Any, parts: list[str]) -> bool:
    """`tree` has the key `parts`, or a `_target_` on its way takes the last of them."""
    if not parts:
        return True
    if not isinstance(tree, dict):
        return False
    if parts[0] in tree and _holds(tree[parts[0]], parts[1:]):
        return True
    return (
        len(parts) == 1
        and "_target_" in tree
        and parts[0] in signature_defaults(get_object(tree["_target_"]))
    )


def _composed_sections() -> set[str]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return set(compose(config_name="train").keys())


def _sections() -> set[str]:
    """The config's sections as written: its groups, and train.yaml's own keys."""
    groups = {p.name for p in config_dir().iterdir() if p.is_dir()}
    return groups | set(_yaml(config_dir() / "train.yaml"))


def numeric_keys() -> list[str]:
    """Every section's numeric keys and the keys their words for null and special values
    name."""
    texts = [null for _, null in NUMERIC_KEYS.values() if null]
    texts += [m for forms, _ in NUMERIC_KEYS.values() for f in forms for m in f.special.values()]
    named = {k for text in texts for k in _KEY_IN_TEXT.findall(text)}
    return sorted({*NUMERIC_KEYS, *(k for k in named if k.split(".")[0] in _sections())})


def test_every_numeric_key_lives_in_the_config() -> None:
    keys = [k for k in numeric_keys() if k.split(".")[0] not in MODEL_SECTIONS]
    missing = [k for k in keys if not lives(k) and k not in NOT_SHIPPED]
    assert not missing, f"a section's table of numbers names keys no shipped config has: {missing}"
    assert len(keys) > 50, "the table and the keys its texts name were read"


def test_the_keys_left_out_are_still_absent() -> None:
    """Once a shipped config has one, its entry in NOT_SHIPPED is to go."""
    assert not [k for k in NOT_SHIPPED if lives(k)]
    assert set(NOT_SHIPPED) <= set(NUMERIC_KEYS)


def test_the_sections_checks_and_the_config_tree_name_exist() -> None:
    sections = _composed_sections()
    needed = [s for s in SECTIONS if s not in MODEL_SECTIONS]
    assert set(needed) <= sections, set(needed) - sections
    shown = [s for s in _TREE_ORDER if s not in MODEL_SECTIONS]
    assert set(shown) <= sections, set(shown) - sections


def _default_groups(primary: Path) -> set[str]:
    """The groups a primary config's defaults list chooses from."""
    defaults = _yaml(primary).get("defaults", [])
    return {next(iter(d)) for d in defaults if isinstance(d, dict)}


def test_other_tools_groups_are_groups_xfmr_train_does_not_compose() -> None:
    for group in OTHER_TOOLS_GROUPS:
        assert (config_dir() / group).is_dir(), group
        assert group not in _default_groups(config_dir() / "train.yaml"), group
        users = [p.name for p in config_dir().glob("*.yaml") if group in _default_groups(p)]
        assert users, f"no entry point's primary config composes {group}"


def test_a_renamed_key_is_caught() -> None:
    assert lives("trainer.max_steps") and lives("callbacks.text_sample.seed")
    assert lives("trainer.limit_train_batches")  # Lightning's, added with +
    assert not lives("trainer.max_step") and not lives("data.batchsize")
