"""The checks of `ModelConfig` that concern its heads and its positional scheme, apart from the
dataclass so that xfmr/nn/config.py keeps to its fields; `config` is a ModelConfig, whose module
imports this one. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_numbers(config: Any) -> None:
    """Sizes are positive, rates lie in [0, 1), epsilons and stds are in range."""
    for name in ("vocab_size", "vocab_multiple", "n_layers", "n_heads", "n_kv_heads",
                 "d_model", "d_ff", "n_decoder_layers"):  # fmt: skip
        if getattr(config, name) is not None and getattr(config, name) < 1:
            raise ValueError(f"{name}={getattr(config, name)} must be a positive integer")
    if config.target_params is not None and config.target_params < 1:
        raise ValueError(
            f"target_params={config.target_params} must be a positive integer, or null"
        )
    for name in ("dropout", "attn_dropout"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name}={getattr(config, name)} must lie in [0, 1)")
    if not config.norm_eps > 0:
        raise ValueError(f"norm_eps={config.norm_eps} must be a number > 0")
    if config.init_std < 0:
        raise ValueError(f"init_std={config.init_std} must be a number >= 0")
    if config.type_vocab_size < 0:
        raise ValueError(f"type_vocab_size={config.type_vocab_size} must be >= 0 (0 = none)")


def check_heads(config: Any) -> None:
    """d_model splits evenly into n_heads, and n_heads into n_kv_heads groups."""
    if config.arch == "rnn":  # an RNN has no heads
        return
    if config.d_model % config.n_heads:
        raise ValueError(
            f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}: "
            f"choose n_heads among {_divisors(config.d_model)}"
        )
    if config.n_kv_heads is not None and config.attention is not None:
        raise ValueError(
            "n_kv_heads is read by xfmr's own attention: a model.attention of your own "
            "chooses its key/value heads itself; leave n_kv_heads null"
        )
    if config.n_kv_heads is not None and config.n_heads % config.n_kv_heads:
        raise ValueError(
            f"n_heads={config.n_heads} is not a multiple of n_kv_heads={config.n_kv_heads}: "
            f"choose n_kv_heads among {_divisors(config.n_heads)} (or null: n_heads)"
        )


def check_parametrization(config: Any) -> None:
    """parametrization=mup has a base width, which n_heads divides (its base head dim), on a
    transformer without sqrt(d_model) on the embeddings (a width-dependent multiplier µP has no
    place for)."""
    if config.mup_base_width is not None and (
        isinstance(config.mup_base_width, bool) or config.mup_base_width < 1
    ):
        raise ValueError(f"mup_base_width={config.mup_base_width} must be a positive integer")
    if config.parametrization != "mup":
        return
    if config.arch == "rnn":
        raise ValueError(
            "parametrization='mup' applies to arch in [decoder, encoder, encoder_decoder]: "
            "an rnn has no µP rule here; use parametrization=sp"
        )
    if config.mup_base_width is None:
        raise ValueError(
            "parametrization='mup' needs mup_base_width, the d_model at which mup equals sp "
            f"(the width the learning rate was tuned at), e.g. mup_base_width={config.d_model}"
        )
    if config.mup_base_width % config.n_heads:
        raise ValueError(
            f"mup_base_width={config.mup_base_width} is not divisible by n_heads="
            f"{config.n_heads}: the base head dim is mup_base_width / n_heads"
        )
    if config.embed_scale:
        raise ValueError(
            "parametrization='mup' with embed_scale=true: sqrt(d_model) on the embeddings "
            "grows with width, which µP's input layer does not; use embed_scale=false"
        )


def check_positions(config: Any, allowed: Sequence[str]) -> None:
    """The positional scheme applies to the architecture (`allowed`: the schemes it takes)
    and its settings are valid."""
    pos = config.pos
    if pos.name not in allowed and not (pos.target and config.arch != "rnn"):
        raise ValueError(
            f"pos.name={pos.name!r} does not apply to arch={config.arch!r}: "
            f"arch={config.arch!r} accepts pos.name in {list(allowed)}"
        )
    if pos.target:
        return
    if pos.name == "rotary" and config.head_dim % 2:
        raise ValueError(
            f"pos.name='rotary' rotates channel pairs and needs an even head dim, but "
            f"d_model={config.d_model} / n_heads={config.n_heads} = {config.head_dim}"
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


def check_attention(config: Any) -> None:
    """Windows, their layer pattern and soft-caps are positive, and read by xfmr's attention."""
    for name in ("window", "global_every"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or value < 1):
            raise ValueError(f"{name}={value} must be a positive integer, or null")
    if config.global_every is not None and config.window is None:
        raise ValueError(
            f"global_every={config.global_every} chooses which layers keep their window, "
            "but window is null: set model.window, or leave global_every null"
        )
    for name in ("attn_softcap", "logit_softcap"):
        value = getattr(config, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name}={value} must be a number > 0, or null (no cap)")
    for name in ("window", "attn_softcap"):
        if getattr(config, name) is not None and config.attention is not None:
            raise ValueError(
                f"{name} is read by xfmr's own attention, not by a model.attention of your "
                f"own: leave {name} null, or pass it among your attention's arguments"
            )


def check_rope_scaling(pos: Any) -> None:
    """Rotary scaling's factors are ones Llama 3.1's formula can use."""
    if pos.rope_scaling == "none":
        return
    if pos.name != "rotary" or pos.target:
        raise ValueError(
            f"pos.rope_scaling={pos.rope_scaling!r} scales rotary frequencies, but "
            f"pos.name={pos.name!r}: use pos=rotary, or pos.rope_scaling=none"
        )
    if not pos.rope_factor >= 1.0:
        raise ValueError(f"pos.rope_factor={pos.rope_factor} must be >= 1")
    if pos.rope_original_max_positions < 1:
        raise ValueError(
            f"pos.rope_original_max_positions={pos.rope_original_max_positions} must be >= 1"
        )
    if (
        pos.rope_scaling == "llama3"
        and not 0 < pos.rope_low_freq_factor < pos.rope_high_freq_factor
    ):
        raise ValueError(
            f"pos.rope_low_freq_factor={pos.rope_low_freq_factor} and pos.rope_high_freq_factor="
            f"{pos.rope_high_freq_factor} must satisfy 0 < low < high"
        )
