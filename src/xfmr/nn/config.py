"""The shape of a model: one typed dataclass, checked and derived in one place.

This module imports no torch, so the CLI can check a composed config before anything heavy loads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

ARCHS = ("decoder", "encoder", "encoder_decoder", "rnn")
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu", "geglu", "geglu_tanh")
RNN_CELLS = ("gru", "lstm", "tanh")
# The names of `xfmr.nn.positions.POSITIONS` (a test keeps the two in step).
POS_NAMES = ("none", "sinusoidal", "learned", "relative", "rotary", "alibi")
# The schemes that give a position past the length a model trained on, from a formula or from
# key-query distances, so that it can be run on longer sequences (`extend_positions`); learned
# positions are only the rows their table holds.
EXTENDING_POSITIONS = ("none", "sinusoidal", "relative", "rotary", "alibi")
# Which positional schemes each architecture can use: an RNN orders tokens by recurrence.
ARCH_POSITIONS = {
    "decoder": POS_NAMES,
    "encoder": POS_NAMES,
    "encoder_decoder": POS_NAMES,
    "rnn": ("none",),
}
# Segment (token-type) embeddings belong to an encoder stack (BERT).
SEGMENT_ARCHS = ("encoder", "encoder_decoder")
TRANSFORMER_ARCHS = ("decoder", "encoder", "encoder_decoder")
# Model keys that only some architectures read. Every arch config declares them all, null
# where they do not apply, so any of them is set without `+`; a value for an architecture
# that would ignore it is refused (`xfmr.checks.model_config`).
ARCH_ONLY_KEYS = {
    "type_vocab_size": SEGMENT_ARCHS,
    "embed_norm": TRANSFORMER_ARCHS,
    "embed_scale": TRANSFORMER_ARCHS,
    "n_decoder_layers": ("encoder_decoder",),
    "share_embeddings": ("encoder_decoder",),
    "scale_logits": ("encoder_decoder",),
    "rnn_cell": ("rnn",),
}


@dataclass
class PosConfig:
    """Positional scheme: `name` picks the class from `xfmr.nn.positions.POSITIONS`.

    Args:
        name: one of POS_NAMES.
        max_positions: table size for `learned` (a hard limit) and `sinusoidal`; unused otherwise.
        num_buckets: `relative` only: buckets of relative distance (T5: 32).
        max_distance: `relative` only: distances at or beyond this share the last bucket (T5: 128).
        rotary_base: `rotary` only: the base of the angle frequencies (RoFormer: 10000).
    """

    name: str = "learned"
    max_positions: int | None = 1024
    num_buckets: int = 32
    max_distance: int = 128
    rotary_base: float = 10000.0

    def __post_init__(self) -> None:
        _check_types("pos.", self)
        if self.max_positions is not None and self.max_positions < 1:
            raise ValueError(
                f"pos.max_positions={self.max_positions} must be a positive integer, or null"
            )


@dataclass
class ModelConfig:
    """Everything that decides a model's parameters and forward pass.

    `vocab_size` is known only once the tokenizer exists, so builders pass it in.
    Fields that apply to one architecture only are ignored by the others, except where a
    silent ignore would hide a mistake (positions on an RNN, segments on a decoder).
    """

    vocab_size: int
    arch: str = "decoder"
    n_layers: int = 4  # encoder layers for encoder_decoder; recurrent layers for rnn
    n_heads: int = 4
    d_model: int = 128  # also the RNN's hidden size
    d_ff: int | None = None  # None: 4 * d_model (Vaswani et al. 2017, sec. 3.3)
    dropout: float = 0.0  # on embeddings and residual branches; between RNN layers
    attn_dropout: float = 0.0  # on attention weights
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    placement: str = "pre"
    bias: bool = True
    tie_embeddings: bool = True
    init_std: float = 0.02
    attn_scale: bool = True  # False: no 1/sqrt(d_head) on scores (T5, Raffel et al. 2020)
    type_vocab_size: int = 0  # segment embeddings (BERT); 0 = none
    embed_norm: bool = False  # a norm after the summed embeddings (BERT)
    embed_scale: bool = False  # token embeddings * sqrt(d_model) (Vaswani et al. 2017, sec. 3.4)
    n_decoder_layers: int | None = None  # encoder_decoder; None: n_layers
    share_embeddings: bool = True  # encoder_decoder: source and target share one embedding
    scale_logits: bool = False  # encoder_decoder: output * d_model**-0.5 before the LM head (T5)
    rnn_cell: str = "lstm"
    pos: PosConfig = field(default_factory=PosConfig)

    def __post_init__(self) -> None:
        if isinstance(self.pos, dict):
            self.pos = PosConfig(**self.pos)
        _check_types("", self)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers
        _check_choice("arch", self.arch, ARCHS)
        _check_choice("norm", self.norm, NORMS)
        _check_choice("placement", self.placement, PLACEMENTS)
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("rnn_cell", self.rnn_cell, RNN_CELLS)
        _check_choice("pos.name", self.pos.name, POS_NAMES)
        for name in ("vocab_size", "n_layers", "n_heads", "d_model", "d_ff", "n_decoder_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.d_model % self.n_heads and self.arch != "rnn":  # an RNN has no heads
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose n_heads among {divisors(self.d_model)}"
            )
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must lie in [0, 1)")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps={self.norm_eps} must be a number > 0")
        if self.init_std < 0:
            raise ValueError(f"init_std={self.init_std} must be a number >= 0")
        self._check_arch_fields()
        self._check_positions()

    def _check_arch_fields(self) -> None:
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size={self.type_vocab_size} must be >= 0 (0 = none)")
        if self.type_vocab_size and self.arch not in SEGMENT_ARCHS:
            raise ValueError(
                f"type_vocab_size={self.type_vocab_size} with arch={self.arch!r}: segment "
                f"embeddings need arch in {list(SEGMENT_ARCHS)}; set type_vocab_size=0"
            )

    def _check_positions(self) -> None:
        pos, allowed = self.pos, ARCH_POSITIONS[self.arch]
        if pos.name not in allowed:
            raise ValueError(
                f"pos.name={pos.name!r} does not apply to arch={self.arch!r}: "
                f"arch={self.arch!r} accepts pos.name in {list(allowed)}"
            )
        if pos.name == "rotary" and self.head_dim % 2:
            raise ValueError(
                f"pos.name='rotary' rotates channel pairs and needs an even head dim, but "
                f"d_model={self.d_model} / n_heads={self.n_heads} = {self.head_dim}"
            )
        if pos.name == "relative":
            if pos.num_buckets < 4:
                raise ValueError(f"pos.num_buckets={pos.num_buckets} must be >= 4")
            if pos.max_distance <= pos.num_buckets // 2:
                raise ValueError(
                    f"pos.max_distance={pos.max_distance} must exceed pos.num_buckets // 2 = "
                    f"{pos.num_buckets // 2} (the exactly-bucketed distances)"
                )
        if pos.name == "rotary" and pos.rotary_base <= 1.0:
            raise ValueError(f"pos.rotary_base={pos.rotary_base} must be > 1")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def sinusoid_scale(self) -> float:
        """What the sinusoids are multiplied by before they join the token embeddings: the
        scale the token embeddings start at, init_std (times sqrt(d_model) with embed_scale).

        Vaswani et al. 2017 (sec. 3.4, 3.5) add unit sinusoids to token embeddings that start
        near unit scale (drawn at d^-0.5 in tensor2tensor, then multiplied by sqrt(d_model)).
        Here embeddings start at init_std 0.02 (GPT-2), and unit sinusoids would be ~35 times
        the token (norms sqrt(d/2) against 0.02 sqrt(d)): the token drowns and a decoder learns
        little past unigram frequencies. Scaled to the tokens, the sinusoids keep the paper's
        proportion, and start on the footing of learned positions, which are drawn at
        init_std too. (x-transformers' ScaledSinusoidalEmbedding shrinks them as well, by
        d^-0.5 behind a learned gain; that still leaves them several times the token here.)
        """
        start = self.init_std or 1.0  # zero-initialised embeddings: keep unit sinusoids
        return start * self.d_model**0.5 if self.embed_scale else start

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        """Build from a plain dict; an unknown key is an error that lists the known ones."""
        _check_keys("model", values, cls)
        pos = dict(values.get("pos") or {})
        _check_keys("pos", pos, PosConfig)
        return cls(**{**values, "pos": PosConfig(**pos)})

    @classmethod
    def from_sections(
        cls, model: dict[str, Any], pos: dict[str, Any], *, vocab_size: int
    ) -> ModelConfig:
        """Build from a config's `model` and `pos` sections. A key that belongs to other
        architectures (ARCH_ONLY_KEYS) is dropped when null and an error when set."""
        values = dict(model)
        arch = values.get("arch", "decoder")
        for key, archs in ARCH_ONLY_KEYS.items():
            if arch in archs or key not in values:
                continue
            if values[key] is not None:
                raise ValueError(
                    f"model.{key}={values[key]!r} applies to arch in {list(archs)} only, not "
                    f"arch={arch}: leave it null"
                )
            del values[key]  # null: the key does not apply here
        return cls.from_dict({**values, "pos": pos, "vocab_size": vocab_size})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")


# What a field's annotation accepts; bool is an int to Python, but never a number here.
_TYPE_NAMES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _accepts(type_name: str, value: Any) -> bool:
    if type_name == "None":
        return value is None
    if type_name == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    kinds = {"int": int, "float": int | float, "str": str}[type_name]
    return isinstance(value, kinds) and (type_name == "str" or math.isfinite(value))


def _check_types(prefix: str, config: Any) -> None:
    """Each field of a plain type (int, float, bool, str, or that or None) holds one."""
    for f in fields(config):
        names = str(f.type).split(" | ")
        if not set(names) <= {*_TYPE_NAMES, "None"}:
            continue  # a nested config or a tuple
        value = getattr(config, f.name)
        if not any(_accepts(name, value) for name in names):
            valid = " or ".join(_TYPE_NAMES.get(name, "null") for name in names)
            raise ValueError(f"{prefix}{f.name}={value!r} must be {valid}")


def _check_keys(section: str, values: dict[str, Any], cls: type) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {section} key(s) {unknown}; valid keys: {sorted(known)}")
