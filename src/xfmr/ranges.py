"""Numbers in a config: `Number`, the type and range a numeric key accepts, and `check_numbers`,
which holds a section's values to its table. Each section declares its table beside the code
that reads it (`xfmr.data.config.NUMBERS`, ...); `model.*` is checked by `ModelConfig` itself.
Checked when the run's config is read, before anything heavy loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xfmr.errors import UserError


@dataclass(frozen=True)
class Number:
    """Integers (`whole`) or any finite number, within [low, high]; `open_low` / `open_high`
    leave a bound out. `special` lists values allowed outside the range (a number, or a word
    such as auto) and what they mean; `items` asks for a list of that many."""

    whole: bool = False
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    special: dict[int | str, str] = field(default_factory=dict)
    items: int | None = None

    def accepts(self, value: Any) -> bool:
        if self.items is not None:
            return (
                isinstance(value, list | tuple)
                and len(value) == self.items
                and all(self._accepts_one(v) for v in value)
            )
        return self._accepts_one(value)

    def _accepts_one(self, value: Any) -> bool:
        if isinstance(value, str):
            return value in self.special
        kinds = int if self.whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            return False
        if value in self.special:
            return True
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.whole else "a number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            text = f"{kind} in {left}{_num(self.low)}, {_num(self.high)}{right}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.open_low else '>='} {_num(self.low)}"
        else:
            text = kind
        if self.items is not None:
            text = f"a list of {self.items} numbers, each {text.split(' ', 2)[-1]}"
        specials = [f"{value} ({meaning})" for value, meaning in self.special.items()]
        return ", or ".join([text, *specials])


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


STEPS = Number(whole=True, low=1)
COUNT = Number(whole=True, low=0)
FRACTION_OPEN = Number(low=0, high=1, open_low=True, open_high=True)
FRACTION = Number(low=0, high=1)
NON_NEGATIVE = Number(low=0)
POSITIVE = Number(low=0, open_low=True)
SEED = Number(whole=True, low=0, high=2**32 - 1)  # numpy's seed range (Lightning seeds it too)
RUN_STEPS = Number(whole=True, low=1, special={-1: "no step limit: trainer.max_epochs ends it"})
TOP_K = Number(whole=True, low=0, special={-1: "keep every checkpoint"})
WORKERS = Number(whole=True, low=0, special={"auto": "chosen for the device the run trains on"})

_ABSENT = object()

# A table of a section's numeric keys: each key's forms (any one will do), and what null means
# where null is allowed. Each section declares its own beside the code that reads it.
NumberTable = dict[str, tuple[tuple[Number, ...], str | None]]


def check_numbers(section: str, values: Mapping[str, Any], table: NumberTable) -> None:
    """Every key of `table` that `values` holds is a number of its type and range."""
    for key, (forms, null) in table.items():
        value = values.get(key, _ABSENT)
        if value is _ABSENT or (value is None and null is not None):
            continue
        if isinstance(value, tuple):
            value = list(value)
        if not any(form.accepts(value) for form in forms):
            valid = " or ".join(form.describe() for form in forms)
            if null is not None:
                valid += f", or null ({null})"
            name = f"{section}.{key}" if section else key
            raise UserError(f"{name}={value!r} is not valid: use {valid}")


def warmup_length(steps: int | None, ratio: float | None, total_steps: int) -> int:
    """The warm-up in optimizer steps: `schedule.warmup_steps` when set, else
    `schedule.warmup_ratio` of the run's `total_steps`, rounded and at least one step (Hugging
    Face's `warmup_ratio`), so a shipped warm-up follows the length of the run; else none."""
    if steps is not None:
        return int(steps)
    if not ratio:
        return 0
    return max(1, round(ratio * total_steps))
