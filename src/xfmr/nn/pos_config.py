"""The positional scheme's keys (`model.pos`): `PosConfig`, declared like `ModelConfig`'s keys.

This module imports no torch, like `xfmr.nn.config`, which re-exports what is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from xfmr.keys import unknown_key
from xfmr.nn.key import check_choice, check_types, key

# The names of `xfmr.nn.positions.POSITIONS` (a test keeps the two in step).
POS_NAMES = ("none", "sinusoidal", "learned", "relative", "rotary", "alibi")
# The schemes that give a position past the length a model trained on, from a formula or from
# key-query distances, so that it can be run on longer sequences (`extend_positions`); learned
# positions are only the rows their table holds.
EXTENDING_POSITIONS = ("none", "sinusoidal", "relative", "rotary", "alibi")
# Where a positional scheme acts (`xfmr.nn.positions.PositionScheme.kind`).
POSITION_KINDS = ("absolute", "bias", "rotary")
ROPE_SCALINGS = ("none", "linear", "llama3")
TARGET = "_target_"  # the key that names a plugged-in part's class, as Hydra spells it


@dataclass(frozen=True)
class PosConfig:
    """The positional scheme (`model.pos`): `name` picks the class from
    `xfmr.nn.positions.POSITIONS`, or `_target_` names one of your own (`xfmr.nn.parts`)."""

    name: str = key(
        "learned",
        "the scheme: none, sinusoidal (Vaswani et al. 2017), learned (GPT, BERT), relative "
        "(T5), rotary (Su et al. 2021), alibi (Press et al. 2022), or your own's name",
        choices=POS_NAMES,
    )
    max_positions: int | None = key(
        1024,
        "table size for learned (a hard limit on length) and sinusoidal; unused otherwise",
        fine_tune=True,
        exports=True,
    )
    num_buckets: int = key(32, "relative: buckets of relative distance (T5: 32)", exports=True)
    max_distance: int = key(
        128, "relative: distances at or beyond this share the last bucket (T5: 128)", exports=True
    )
    rotary_base: float = key(
        10000.0, "rotary: the base of the angle frequencies (RoFormer: 10000)", exports=True
    )
    rope_scaling: str = key(
        "none",
        "rotary: frequency scaling for contexts past rope_original_max_positions; linear divides "
        "every frequency by rope_factor (Chen et al. 2023), llama3 only the low ones, blending "
        "between rope_low_freq_factor and rope_high_freq_factor (Llama 3.1)",
        choices=ROPE_SCALINGS,
        exports=True,
    )
    rope_factor: float = key(8.0, "rotary scaling: the factor (Llama 3.1: 8)", exports=True)
    rope_low_freq_factor: float = key(
        1.0,
        "llama3 scaling: wavelengths above original / this are scaled (Llama 3.1: 1)",
        exports=True,
    )
    rope_high_freq_factor: float = key(
        4.0,
        "llama3 scaling: wavelengths below original / this are kept (Llama 3.1: 4)",
        exports=True,
    )
    rope_original_max_positions: int = key(
        8192,
        "rotary scaling: the context the frequencies were made for (Llama 3: 8192)",
        exports=True,
    )
    target: str | None = key(None, "a scheme of your own: its class, `_target_` in YAML")
    options: dict[str, Any] = key({}, "your scheme's own arguments, beside `_target_` in YAML")

    def __post_init__(self) -> None:
        check_types("pos.", self)
        if self.target is None:
            check_choice("pos.name", self.name, POS_NAMES)
        if self.max_positions is not None and self.max_positions < 1:
            raise ValueError(
                f"pos.max_positions={self.max_positions} must be a positive integer, or null"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PosConfig:
        """From `model.pos` as YAML spells it: with `_target_`, the keys that are not fields
        are the scheme's own options."""
        values = dict(values)
        target = values.pop(TARGET, None) or values.pop("target", None)
        known = {f.name for f in fields(cls)} - {"target", "options"}
        options = {**values.pop("options", {}), **{k: values.pop(k) for k in set(values) - known}}
        if options and target is None:
            raise ValueError(unknown_key("model.pos", sorted(options)[0], known))
        return cls(**values, target=target, options=options)

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        target, options = values.pop("target"), values.pop("options")
        return {**values, TARGET: target, **options} if target else values

    @property
    def extends(self) -> bool:
        """Whether positions past those trained on have a value (all but a learned table)."""
        return self.name in EXTENDING_POSITIONS or self.target is not None
