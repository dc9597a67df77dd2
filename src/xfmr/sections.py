"""A plain config section read into a frozen dataclass: each key one of its fields (a misspelt
one refused with the nearest keys), each value of the field's type, each number in its range.
Sections that name a class (`_target_`) are `xfmr.targets.Target`s instead."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

from xfmr.errors import UserError
from xfmr.keys import unknown_key
from xfmr.ranges import NumberTable, check_numbers

Section = TypeVar("Section")

# What a field's annotation accepts; bool is an int to Python, but never a number here.
_TYPES = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}
_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def read_section(
    cls: type[Section],
    name: str,
    values: Mapping[str, Any] | None,
    numbers: NumberTable | None = None,
) -> Section:
    """`cls` from the `name` section's `values`; every mistake a UserError naming the key."""
    values = dict(values or {})
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    for key in values:
        if key not in known:
            raise UserError(unknown_key(name, key, known))
    check_numbers(name, values, numbers or {})
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in values:
            _check_type(f"{name}.{f.name}", str(f.type), values[f.name])
    try:
        return cls(**values)
    except TypeError as e:  # a key with no default left out
        raise UserError(f"{name}: {e}") from None


def _check_type(key: str, annotation: str, value: Any) -> None:
    names = annotation.split(" | ")
    if not set(names) <= {*_TYPES, "None"}:
        return  # a nested mapping or a list: its own checks say
    for type_name in names:
        if type_name == "None" and value is None:
            return
        if type_name in _TYPES and isinstance(value, _TYPES[type_name]):
            if type_name == "bool" or not isinstance(value, bool):
                return
    valid = " or ".join(_NAMES.get(n, "null") for n in names)
    raise UserError(f"{key}={value!r} must be {valid}")
