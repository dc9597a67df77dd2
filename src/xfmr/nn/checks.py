"""What a model's config asks of what surrounds it, checked before torch loads: parts of the
person's own (`model.pos`, `model.attention`, `model.ffn` named by `_target_`) exist and are what
they say, and learned positions cover the longest sequence the data or objective cuts to."""

from __future__ import annotations

from collections.abc import Iterable

from xfmr.declared import declared
from xfmr.errors import UserError
from xfmr.nn.config import EXTENDING_POSITIONS, POSITION_KINDS, TARGET, ModelConfig


def check_parts(model: ModelConfig) -> None:
    """A part of the person's own (`xfmr.nn.parts`) names a class that exists; a positional
    scheme declares a kind of scheme."""
    parts = {
        "model.pos": model.pos.target,
        "model.attention": (model.attention or {}).get(TARGET),
        "model.ffn": (model.ffn or {}).get(TARGET),
    }
    for section, target in parts.items():
        if not target:
            continue
        try:
            facts = declared(target, ("kind",))
        except (ImportError, AttributeError, ValueError):
            raise UserError(
                f"{section}._target_={target}: no such class (is its folder on PYTHONPATH?)"
            ) from None
        if section == "model.pos" and facts.get("kind") not in POSITION_KINDS:
            raise UserError(
                f"model.pos._target_={target} must subclass xfmr.nn.positions.PositionScheme "
                f"and declare kind in {list(POSITION_KINDS)}"
            )


def check_lengths(model: ModelConfig, lengths: Iterable[tuple[str, int | None]]) -> None:
    """Each `(key, length)` a sequence is cut to (token blocks, or whole examples cut to a
    length) fits the positions a learned table has."""
    limit = model.pos.max_positions
    for key, length in lengths:
        too_long = length is not None and limit is not None and length > limit
        if model.pos.name == "learned" and too_long:
            raise UserError(
                f"{key}={length} is longer than model.pos.max_positions={limit} allows with "
                f"pos=learned: set model.pos.max_positions>={length}, lower {key}, or use a "
                f"scheme without a limit (pos in {list(EXTENDING_POSITIONS)})"
            )
