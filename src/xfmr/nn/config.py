"""The shape of a model: `ModelConfig`, the one place a model key is stated.

Each field carries what the key is for (`xfmr.nn.key.Key`: a one-line doc with its paper, the
architectures that read it, whether a fine-tune may change it, whether every value exports to
Hugging Face), and every other table derives from the fields (`xfmr.nn.model_keys`): the keys an
architecture ignores, the keys an `init_from` run may change, the keys an export family need not
list (`xfmr.interop.hf_families`), the table of model keys in docs/architectures.md, Hydra's
schema of the `model` section (`xfmr.schema`); and how two configs differ (`differences`, here).
Adding a key is one field here and the module that reads it.

A run's config holds the model as configured: `ModelConfig.from_section` checks the `model`
section once, with no vocabulary yet (`vocab_size` None: the run sets it from the tokenizer,
`with_vocab`), and `settings` gives the section back as it was given (`d_ff: null` stays null,
so a width chosen later for `target_params` still derives it).

Parts a person plugs in from their own configs (a positional scheme, an attention, a
feed-forward) are named by `_target_` in `model.pos`, `model.attention` and `model.ffn`; the
contracts are in `xfmr.nn.parts`.

This module imports no torch, so the CLI can check a composed config before anything heavy loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from xfmr.keys import unknown_key
from xfmr.nn.config_checks import (
    check_attention,
    check_heads,
    check_numbers,
    check_parametrization,
    check_positions,
    check_rope_scaling,
)
from xfmr.nn.key import (
    ARCHS,
    TRANSFORMER_ARCHS,
    Key,
    check_choice,
    check_types,
    default,
    key,
    key_of,
    yaml_text,
)
from xfmr.nn.pos_config import (
    EXTENDING_POSITIONS,
    POS_NAMES,
    POSITION_KINDS,
    TARGET,
    PosConfig,
)

__all__ = [
    "ARCHS",
    "EXTENDING_POSITIONS",
    "POSITION_KINDS",
    "POS_NAMES",
    "TARGET",
    "TRANSFORMER_ARCHS",
    "ModelConfig",
    "PosConfig",
    "default_of",
    "width_step",
]
NORMS = ("layernorm", "rmsnorm")
QK_NORMS = ("none", *NORMS)
PLACEMENTS = ("pre", "post", "sandwich")
ACTIVATIONS = ("relu", "relu2", "gelu", "gelu_tanh", "swiglu", "geglu", "geglu_tanh")
RNN_CELLS = ("gru", "lstm", "tanh")
PARAMETRIZATIONS = ("sp", "mup")
# Which positional schemes each architecture can use: an RNN orders tokens by recurrence.
ARCH_POSITIONS = {
    "decoder": POS_NAMES,
    "encoder": POS_NAMES,
    "encoder_decoder": POS_NAMES,
    "rnn": ("none",),
}
# Segment (token-type) embeddings belong to an encoder stack (BERT).
SEGMENT_ARCHS = ("encoder", "encoder_decoder")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that decides a model's parameters and forward pass.

    `vocab_size` is known only once the tokenizer exists: None in a run's config as
    configured, set by the run before anything is built (`with_vocab`). A key that some
    architectures do not read says which do (`Key.archs`); a config check refuses it set for
    another (`check_applies`), and `differences` does not count it.
    """

    vocab_size: int | None = key(
        None, "the tokenizer's vocabulary; set by the run", fine_tune=True, exports=True
    )
    arch: str = key("decoder", "what is built (the arch group)", exports=True, choices=ARCHS)
    n_layers: int = key(
        4,
        "layers: encoder layers of an encoder_decoder, recurrent layers of an rnn",
        fine_tune=True,
        exports=True,
    )
    n_heads: int = key(4, "attention heads", archs=TRANSFORMER_ARCHS, exports=True)
    n_kv_heads: int | None = key(
        None,
        "key/value heads, each shared by n_heads / n_kv_heads query heads: grouped-query "
        "attention (Ainslie et al. 2023), 1 multi-query (Shazeer 2019); null: n_heads",
        archs=TRANSFORMER_ARCHS,
    )
    d_model: int = key(128, "model width; the hidden size of an rnn", exports=True)
    target_params: int | None = key(
        None,
        "null: d_model as given; else the run chooses d_model (the nearest width the other "
        "keys allow) so that the model has this many parameters, within 2%",
        fine_tune=True,
        exports=True,
        resume=True,
    )
    d_ff: int | None = key(
        None,
        "feed-forward width; null: 4 * d_model (Vaswani et al. 2017, sec. 3.3)",
        archs=TRANSFORMER_ARCHS,
        exports=True,
    )
    dropout: float = key(
        0.0,
        "on embeddings and residual branches; between the layers of an rnn",
        fine_tune=True,
        exports=True,
    )
    attn_dropout: float = key(
        0.0, "on attention weights", archs=TRANSFORMER_ARCHS, fine_tune=True, exports=True
    )
    activation: str = key(
        "gelu",
        "feed-forward nonlinearity; relu2 is relu(x)^2 (So et al. 2021); swiglu and geglu are "
        "gated (Shazeer 2020)",
        archs=TRANSFORMER_ARCHS,
        choices=ACTIVATIONS,
    )
    norm: str = key(
        "layernorm",
        "layernorm (Ba et al. 2016) or rmsnorm (Zhang & Sennrich 2019)",
        archs=TRANSFORMER_ARCHS,
        choices=NORMS,
    )
    norm_eps: float = key(1e-5, "the norms' epsilon", archs=TRANSFORMER_ARCHS, exports=True)
    placement: str = key(
        "pre",
        "post: x = norm(x + f(x)) (Vaswani et al. 2017); pre: x + f(norm(x)) (Xiong et al. "
        "2020); sandwich: x + norm(f(norm(x))) (Ding et al. 2021; Gemma 2's four norms a block)",
        archs=TRANSFORMER_ARCHS,
        choices=PLACEMENTS,
    )
    bias: bool = key(True, "biases in projections and norms", archs=TRANSFORMER_ARCHS, exports=True)
    qk_norm: str = key(
        "none",
        "q and k normalised per head before positions (OLMo 2, Qwen3)",
        archs=TRANSFORMER_ARCHS,
        choices=QK_NORMS,
    )
    window: int | None = key(
        None,
        "sliding-window attention: a query sees the keys fewer than this many positions away "
        "(causal: itself and window - 1 before; Beltagy et al. 2020, Mistral); null: all",
        archs=TRANSFORMER_ARCHS,
    )
    global_every: int | None = key(
        None,
        "with window: every global_every-th layer sees all keys, the rest their window "
        "(Gemma 2: 2, local and global alternating); null: every layer windowed",
        archs=TRANSFORMER_ARCHS,
    )
    attn_softcap: float | None = key(
        None,
        "attention scores capped to cap * tanh(s / cap) before the softmax (Gemma 2: 50)",
        archs=TRANSFORMER_ARCHS,
    )
    logit_softcap: float | None = key(
        None,
        "the LM's output logits capped to cap * tanh(x / cap) (Gemma 2: 30)",
        archs=("decoder", "encoder_decoder"),
    )
    vocab_multiple: int = key(
        1,
        "the embedding and LM head get vocab_size rounded up to a multiple of this many rows, "
        "for GPU-friendly matmul shapes (nanoGPT pads 50257 to 50304 with 64, as Megatron-LM's "
        "make-vocab-size-divisible-by does); the extra ids are never generated",
        exports=True,
    )
    tie_embeddings: bool = key(
        True, "the LM head is the token embedding (Press & Wolf 2017)", fine_tune=True, exports=True
    )
    init_std: float = key(0.02, "std of fresh weights (GPT-2)", fine_tune=True, exports=True)
    attn_scale: bool = key(
        True, "1/sqrt(d_head) on scores; T5 has none (Raffel et al. 2020)", archs=TRANSFORMER_ARCHS
    )
    parametrization: str = key(
        "sp",
        "sp: the standard parametrization; mup: the maximal update parametrization (Yang et al. "
        "2022, Tensor Programs V): hidden matrices drawn at std / sqrt(m) and stepped at "
        "Adam lr / m, scores 1/d_head, logits / m, with m = d_model / mup_base_width, so an lr "
        "tuned at the base width holds at others (xfmr.nn.mup)",
        archs=TRANSFORMER_ARCHS,
        choices=PARAMETRIZATIONS,
    )
    mup_base_width: int | None = key(
        None,
        "with parametrization=mup, the d_model at which mup is sp (the narrow proxy the lr was "
        "tuned at); read only by mup",
        archs=TRANSFORMER_ARCHS,
    )
    type_vocab_size: int = key(
        0, "segment embeddings (BERT); 0: none", archs=SEGMENT_ARCHS, fine_tune=True, exports=True
    )
    embed_norm: bool = key(
        False, "a norm after the summed embeddings (BERT)", archs=TRANSFORMER_ARCHS
    )
    embed_scale: bool = key(
        False,
        "token embeddings * sqrt(d_model) (Vaswani et al. 2017, sec. 3.4)",
        archs=TRANSFORMER_ARCHS,
    )
    n_decoder_layers: int | None = key(
        None,
        "decoder layers; null: n_layers",
        archs=("encoder_decoder",),
        fine_tune=True,
        exports=True,
    )
    share_embeddings: bool = key(
        True,
        "source and target share one embedding (Vaswani et al. 2017, sec. 3.4)",
        archs=("encoder_decoder",),
        fine_tune=True,
    )
    scale_logits: bool = key(
        False, "output * d_model^-0.5 before the LM head (T5)", archs=("encoder_decoder",)
    )
    rnn_cell: str = key(
        "lstm", "lstm (Hochreiter & Schmidhuber 1997), gru, tanh", archs=("rnn",), choices=RNN_CELLS
    )
    attention: dict[str, Any] | None = key(
        None, "an attention of your own: `_target_` and its arguments", archs=TRANSFORMER_ARCHS
    )
    ffn: dict[str, Any] | None = key(
        None, "a feed-forward of your own: `_target_` and its arguments", archs=TRANSFORMER_ARCHS
    )
    activation_checkpointing: bool = key(
        False,
        "recompute each block's activations in backward instead of keeping them: less memory, "
        "about a third more compute (Chen et al. 2016)",
        archs=TRANSFORMER_ARCHS,
        fine_tune=True,
        exports=True,
        resume=True,
    )
    pos: PosConfig = field(
        default_factory=PosConfig, metadata={"key": Key("the positional scheme (the pos group)")}
    )

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        object.__setattr__(self, "_given", given)  # `settings`: the section as given
        if isinstance(self.pos, Mapping):
            object.__setattr__(self, "pos", PosConfig.from_dict(self.pos))
        check_types("", self)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.n_decoder_layers is None:
            object.__setattr__(self, "n_decoder_layers", self.n_layers)
        for f in fields(self):
            if key_of(f).choices:
                check_choice(f.name, getattr(self, f.name), key_of(f).choices)
        for name in ("attention", "ffn"):
            part = getattr(self, name)
            if part is not None and not (isinstance(part, dict) and part.get(TARGET)):
                raise ValueError(f"{name}={part!r} must be null or name a class in `_target_`")
        check_numbers(self)
        check_heads(self)
        check_parametrization(self)
        check_attention(self)
        check_rope_scaling(self.pos)
        check_positions(self, ARCH_POSITIONS[self.arch])

    def window_of(self, layer: int) -> int | None:
        """The sliding window of layer `layer` (0-based) of a stack; None where it sees all keys:
        with global_every k, layers k - 1, 2k - 1, ... (Gemma 2, k = 2: the odd ones)."""
        if self.window is None or (self.global_every and (layer + 1) % self.global_every == 0):
            return None
        return self.window

    @property
    def padded_vocab_size(self) -> int:
        """The rows of the token embedding and the LM head, `vocab_size` rounded up to a
        multiple of `vocab_multiple` (itself at 1). Ids from vocab_size on are never a token."""
        if self.vocab_size is None:
            raise ValueError("vocab_size is not set: the run sets it from the tokenizer")
        return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def sinusoid_scale(self) -> float:
        """The scale the token embeddings start at, init_std (times sqrt(d_model) with
        embed_scale), which the sinusoids are multiplied by before they join them.

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
    def from_dict(cls, values: Mapping[str, Any]) -> ModelConfig:
        """Build from a plain dict (a saved config or checkpoint); an unknown key is an error
        naming the nearest keys."""
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(unknown_key("model", unknown[0], [f.name for f in fields(cls)]))
        return cls(**{**values, "pos": PosConfig.from_dict(values.get("pos") or {})})

    @classmethod
    def from_settings(cls, values: Mapping[str, Any], *, vocab_size: int | None) -> ModelConfig:
        """Build from a config's `model` section, refusing a key set for an architecture
        that does not read it (`check_applies`)."""
        cls.check_applies(values)
        return cls.from_dict({**values, "vocab_size": vocab_size})

    @classmethod
    def from_section(cls, values: Mapping[str, Any]) -> ModelConfig:
        """The `model` section as configured, checked, with no vocabulary yet. With
        `target_params` the run chooses the width once the vocabulary is known
        (`xfmr.nn.sizing`); until then d_model is rounded up to a width it may choose, so that
        a d_model the run will not use is not refused."""
        values = dict(values)
        if values.get("target_params") is not None and isinstance(values.get("d_model"), int):
            step = width_step(values)
            values["d_model"] = max(step, -(-values["d_model"] // step) * step)
        return cls.from_settings(values, vocab_size=None)

    @classmethod
    def from_saved(cls, config: Mapping[str, Any]) -> ModelConfig:
        """The model a saved config.yaml configured (`config`: the whole file). A run saved
        before positions moved under `model` has them in a `pos` section beside it, and null
        for the keys of other architectures: read as today's."""
        model = dict(config["model"])
        if "pos" not in model and config.get("pos") is not None:
            model["pos"] = dict(config["pos"])
            model = {k: v for k, v in model.items() if v is not None or default_of(k) is None}
        return cls.from_section(model)

    def settings(self) -> dict[str, Any]:
        """The section as it was given (derived keys such as `d_ff` still null), for
        config.yaml; with `vocab_size` left out."""
        given = dict(getattr(self, "_given", None) or self.to_dict())
        given.pop("vocab_size", None)
        pos = given.get("pos")
        given["pos"] = pos.to_dict() if isinstance(pos, PosConfig) else dict(pos or {})
        return given

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        """The model at the tokenizer's vocabulary (derived keys derived again)."""
        return ModelConfig.from_dict({**self.settings(), "vocab_size": vocab_size})

    @classmethod
    def check_applies(cls, values: Mapping[str, Any]) -> None:
        """A key some architectures read, set to other than its default for another, is a
        mistake (it would be ignored): ValueError naming the architectures that read it."""
        arch = values.get("arch", "decoder")
        for f in fields(cls):
            archs, usual = key_of(f).archs, default(f)
            if arch in archs or f.name not in values or values[f.name] == usual:
                continue
            raise ValueError(
                f"model.{f.name}={values[f.name]!r} applies to arch in {list(archs)} only, not "
                f"arch={arch}: leave it at its default ({yaml_text(usual)})"
            )

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**values, "pos": self.pos.to_dict()}

    def flat(self) -> dict[str, Any]:
        """Every key by its dotted name under `model` (`pos.name`, `pos.max_positions`)."""
        values = self.to_dict()
        pos = values.pop("pos")
        return {**values, **{f"pos.{k}": v for k, v in pos.items()}}

    def reads(self, name: str) -> bool:
        """Whether this architecture reads key `name` (dotted names: their top-level key)."""
        found = field_named(name.split(".")[0])
        return found is None or self.arch in key_of(found).archs


def width_step(values: dict[str, Any]) -> int:
    """Widths (`d_model`) the checks allow for the `model` section `values` are multiples of
    this: of n_heads in a transformer, of 2 n_heads where rotary positions rotate channel pairs
    within a head; an RNN's hidden size has no heads to divide."""
    arch = values.get("arch", default_of("arch"))
    if arch not in TRANSFORMER_ARCHS:
        return 1
    pos = values.get("pos") or {}
    rotates = pos.get("name", default_of("pos.name")) == "rotary" and not pos.get(TARGET)
    heads = values.get("n_heads", default_of("n_heads"))
    if not isinstance(heads, int) or heads < 1:
        return 1  # ModelConfig names the bad value
    return heads * (2 if rotates else 1)


def field_named(name: str) -> Field | None:
    """The field of dotted model key `name` (`pos.name`), or None."""
    cls, name = (PosConfig, name[4:]) if name.startswith("pos.") else (ModelConfig, name)
    return next((f for f in fields(cls) if f.name == name), None)


def default_of(name: str) -> Any:
    """The default of dotted key `name` (`pos.name`); None for a key of a part of your own."""
    found = field_named(name)
    return None if found is None else default(found)
