"""The shape of a model: one typed dataclass, checked and derived in one place."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

ARCHS = ("decoder",)
NORMS = ("layernorm",)
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("gelu", "relu")


@dataclass
class PosConfig:
    """Positional scheme: `name` picks the class from `xfmr.nn.positions.POSITIONS`."""

    name: str = "learned"
    max_positions: int | None = 1024


@dataclass
class ModelConfig:
    """Everything that decides a model's parameters and forward pass.

    `vocab_size` is known only once the tokenizer exists, so builders pass it in.
    """

    vocab_size: int
    arch: str = "decoder"
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None  # None: 4 * d_model (Vaswani et al. 2017, sec. 3.3)
    dropout: float = 0.0  # on embeddings and residual branches
    attn_dropout: float = 0.0  # on attention weights
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    placement: str = "pre"
    bias: bool = True
    tie_embeddings: bool = True
    init_std: float = 0.02
    pos: PosConfig = field(default_factory=PosConfig)

    def __post_init__(self) -> None:
        if isinstance(self.pos, dict):
            self.pos = PosConfig(**self.pos)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        _check_choice("arch", self.arch, ARCHS)
        _check_choice("norm", self.norm, NORMS)
        _check_choice("placement", self.placement, PLACEMENTS)
        _check_choice("activation", self.activation, ACTIVATIONS)
        for name in ("vocab_size", "n_layers", "n_heads", "d_model", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose n_heads among {divisors(self.d_model)}"
            )
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must lie in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a plain dict; an unknown key is an error that lists the known ones."""
        _check_keys("model", values, cls)
        pos = dict(values.get("pos") or {})
        _check_keys("pos", pos, PosConfig)
        return cls(**{**values, "pos": PosConfig(**pos)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")


def _check_keys(section: str, values: dict[str, Any], cls: type) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {section} key(s) {unknown}; valid keys: {sorted(known)}")
