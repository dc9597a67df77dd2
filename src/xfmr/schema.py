"""Hydra's schema of the `model` section, made from `ModelConfig`'s fields.

Registered in Hydra's ConfigStore as `model/schema`, the first entry of xfmr-train's defaults:
the arch, size and pos groups are deltas on it, a key the schema lacks is refused by Hydra, and
a value is converted to the field's type. `vocab_size` is left out (the run sets it from the
tokenizer); `pos`, `attention` and `ffn` stay open mappings, since a part of your own brings
keys of its own (`xfmr.nn.parts`). Hydra imports `hydra_plugins.xfmr_model` at start-up, which
registers it, so every composition sees it: xfmr-train's, `xfmr.compose`'s and Hydra's compose
API in a notebook.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from xfmr.nn.config import ModelConfig, PosConfig, default_of

SCHEMA_GROUP, SCHEMA_NAME = "model", "schema"
_OPEN = ("pos", "attention", "ffn")
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def model_schema() -> type:
    """A dataclass with ModelConfig's keys, types and defaults, as OmegaConf reads a schema."""
    made = []
    for f in dataclasses.fields(ModelConfig):
        if f.name == "vocab_size":
            continue
        if f.name in _OPEN:
            default = _pos_defaults() if f.name == "pos" else None
            made.append((f.name, Any, dataclasses.field(default_factory=lambda d=default: d)))
            continue
        names = str(f.type).split(" | ")
        kind = _TYPES[names[0]]
        made.append((f.name, Optional[kind] if "None" in names else kind, f.default))  # noqa: UP045
    return dataclasses.make_dataclass("ModelSchema", made)


def _pos_defaults() -> dict[str, Any]:
    return {
        f.name: default_of(f"pos.{f.name}")
        for f in dataclasses.fields(PosConfig)
        if f.name not in ("target", "options")
    }


def register() -> None:
    """Store the schema in Hydra's ConfigStore (again is harmless)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group=SCHEMA_GROUP, name=SCHEMA_NAME, node=model_schema())
