"""How a model key is declared: `Key`, the facts on one field of `ModelConfig` or `PosConfig`
(`xfmr.nn.config`), and the checks every such field gets from its annotation (an int holds an
integer, a bool true or false, ...). No torch: the CLI checks a config before anything loads."""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

ARCHS = ("decoder", "encoder", "encoder_decoder", "rnn")
TRANSFORMER_ARCHS = ("decoder", "encoder", "encoder_decoder")


@dataclass(frozen=True)
class Key:
    """What one model key is for, declared on its field.

    Args:
        doc: one line, with the paper it comes from.
        archs: the architectures that read it; a value other than the default for another
            architecture is refused (`ModelConfig.check_applies`).
        fine_tune: a run started `init_from` another may change it (regularisation, depth,
            vocabulary, a table's size); every other key must agree with the source.
        exports: every value exports to each Hugging Face family (sizes, rates); otherwise a
            family exports the values it lists (`xfmr.interop.hf_families`), and a family
            that does not list the key exports its default only.
        choices: the valid values of a string key.
        resume: a resumed run may change it: it changes how the model computes, not its
            parameters or what it computes, or how the width is chosen (`target_params`: the
            width chosen is compared itself) (`resume_keys`).
    """

    doc: str
    archs: tuple[str, ...] = ARCHS
    fine_tune: bool = False
    exports: bool = False
    choices: tuple[str, ...] = ()
    resume: bool = False


def key(default: Any = MISSING, doc: str = "", **facts: Any) -> Any:
    """A model field: its default and its `Key`."""
    meta = {"key": Key(doc, **facts)}
    if isinstance(default, dict | list):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def key_of(f: Field) -> Key:
    return f.metadata["key"]


def default(f: Field) -> Any:
    """The field's default (None where it has none)."""
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else None


def yaml_text(value: Any) -> str:
    """`value` as YAML spells it (null, true, false)."""
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")


# What a field's annotation accepts; bool is an int to Python, but never a number here.
TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def accepts(type_name: str, value: Any) -> bool:
    if type_name == "None":
        return value is None
    if type_name == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    kinds = {"int": int, "float": int | float, "str": str}[type_name]
    return isinstance(value, kinds) and (type_name == "str" or math.isfinite(value))


def plain_types(f: Field) -> list[str] | None:
    """The names in a field's annotation (`int | None` -> ["int", "None"]); None for a nested
    config or a mapping."""
    names = str(f.type).split(" | ")
    return names if set(names) <= {*TYPE_NAMES, "None"} else None


def check_types(prefix: str, config: Any) -> None:
    """Each field of a plain type (int, float, bool, str, or that or None) holds one."""
    for f in fields(config):
        names = plain_types(f)
        if names is None:
            continue
        value = getattr(config, f.name)
        if not any(accepts(name, value) for name in names):
            valid = " or ".join(TYPE_NAMES.get(name, "null") for name in names)
            raise ValueError(f"{prefix}{f.name}={value!r} must be {valid}")
