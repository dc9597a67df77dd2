"""Hugging Face configs <-> xfmr ModelConfigs for the rotary decoders of the Llama line: Llama
(`LlamaForCausalLM`), Mistral (+ a sliding window), Qwen3 (+ per-head q/k RMSNorm, windows by
layer) and Gemma 2 (+ sandwich norms, scaled embeddings, soft-capped scores and logits,
alternating local and global layers). Two functions per family, as in `hf_configs`; the fields
they share are read and written once (`_decoder`, `_hf_decoder`).

Every family here writes `head_dim` as d_model / n_heads and refuses any other on import; rotary
scaling is transformers 5's `rope_parameters` (`rope_parameters`, `rope_settings`), and which
layers slide is its `layer_types` (`layer_types`, `window_pattern`).
"""

from __future__ import annotations

from typing import Any

from xfmr.interop.hf_configs import hf_name, read_activation, require_field
from xfmr.nn.config import ModelConfig, PosConfig

# The Llama line's MLP is always gated: act(gate_proj x) * up_proj x.
LLAMA_ACTIVATIONS = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}
# transformers' `rope_parameters["rope_type"]` -> xfmr's `pos.rope_scaling`.
ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3"}
SLIDING, FULL = "sliding_attention", "full_attention"  # transformers' `layer_types`
NO_TABLE_LIMIT = 8192  # max_position_embeddings written for rotary, which has no table limit


def rope_parameters(pos: PosConfig) -> dict[str, Any]:
    """transformers' `rope_parameters` of xfmr's rotary settings."""
    params: dict[str, Any] = {
        "rope_type": hf_name(ROPE_TYPES, pos.rope_scaling),
        "rope_theta": pos.rotary_base,
    }
    if pos.rope_scaling != "none":
        params["factor"] = pos.rope_factor
    if pos.rope_scaling == "llama3":
        params |= {
            "low_freq_factor": pos.rope_low_freq_factor,
            "high_freq_factor": pos.rope_high_freq_factor,
            "original_max_position_embeddings": pos.rope_original_max_positions,
        }
    return params


def rope_settings(hf: Any) -> dict[str, Any]:
    """`model.pos` of an HF config's rotary positions; a rope_type xfmr lacks is refused."""
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    kind = rope.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise ValueError(
            f"{hf.model_type} rope_parameters.rope_type={kind!r} is not supported: xfmr maps "
            f"{sorted(ROPE_TYPES)} (model.pos.rope_scaling)"
        )
    settings: dict[str, Any] = {
        "name": "rotary",
        "max_positions": hf.max_position_embeddings,
        "rotary_base": float(rope.get("rope_theta", 10000.0)),
        "rope_scaling": ROPE_TYPES[kind],
    }
    if kind != "default":
        settings["rope_factor"] = float(rope["factor"])
    if kind == "llama3":
        settings |= {
            "rope_low_freq_factor": float(rope["low_freq_factor"]),
            "rope_high_freq_factor": float(rope["high_freq_factor"]),
            "rope_original_max_positions": int(rope["original_max_position_embeddings"]),
        }
    return settings


def layer_types(config: ModelConfig) -> list[str]:
    """transformers' `layer_types`: which layers slide (`ModelConfig.window_of`)."""
    return [SLIDING if config.window_of(i) else FULL for i in range(config.n_layers)]


def window_pattern(hf: Any) -> dict[str, int | None]:
    """`window` and `global_every` of an HF config's `sliding_window` and `layer_types`: none
    sliding, all, or all but every k-th (k - 1, 2k - 1, ...); another pattern is refused."""
    types = list(getattr(hf, "layer_types", None) or [FULL] * hf.num_hidden_layers)
    sliding = [kind == SLIDING for kind in types]
    why = (
        "xfmr windows no layer, every layer (model.window), or all but every k-th "
        "(model.global_every=k: layers k-1, 2k-1, ... see all keys)"
    )
    if any(kind not in (SLIDING, FULL) for kind in types):
        raise ValueError(f"{hf.model_type} layer_types={types} is not supported: {why}")
    if not any(sliding):
        return {"window": None, "global_every": None}
    if hf.sliding_window is None:
        raise ValueError(
            f"{hf.model_type} layer_types={types} with sliding_window=None is not supported: "
            "a sliding layer needs its window"
        )
    if all(sliding):
        return {"window": hf.sliding_window, "global_every": None}
    for every in range(2, len(types) + 1):
        if sliding == [(i + 1) % every != 0 for i in range(len(types))]:
            return {"window": hf.sliding_window, "global_every": every}
    raise ValueError(f"{hf.model_type} layer_types={types} is not supported: {why}")


def _decoder(hf: Any, *, activation_field: str = "hidden_act", **settings: Any) -> ModelConfig:
    """The ModelConfig of the fields the Llama line shares, with the family's `settings`."""
    require_field(
        hf,
        "head_dim",
        hf.hidden_size // hf.num_attention_heads,
        "xfmr's head dim is d_model / n_heads",
    )
    kv_heads = getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads
    shared: dict[str, Any] = dict(
        vocab_size=hf.vocab_size,
        arch="decoder",
        n_layers=hf.num_hidden_layers,
        n_heads=hf.num_attention_heads,
        n_kv_heads=None if kv_heads == hf.num_attention_heads else kv_heads,
        d_model=hf.hidden_size,
        d_ff=hf.intermediate_size,
        dropout=0.0,  # the Llama line drops out only attention weights
        attn_dropout=float(hf.attention_dropout),
        activation=read_activation(hf, activation_field, LLAMA_ACTIVATIONS),
        norm="rmsnorm",
        norm_eps=hf.rms_norm_eps,
        placement="pre",
        bias=False,
        tie_embeddings=hf.tie_word_embeddings,
        init_std=hf.initializer_range,
        pos=PosConfig(**rope_settings(hf)),
    )
    return ModelConfig(**{**shared, **settings})


def _hf_decoder(config: ModelConfig, *, activation_field: str = "hidden_act") -> dict[str, Any]:
    """The HF config fields the Llama line shares."""
    return {
        "vocab_size": config.padded_vocab_size,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads or config.n_heads,
        "head_dim": config.head_dim,
        activation_field: hf_name(LLAMA_ACTIVATIONS, config.activation),
        "max_position_embeddings": config.pos.max_positions or NO_TABLE_LIMIT,
        "rms_norm_eps": config.norm_eps,
        "rope_parameters": rope_parameters(config.pos),
        "attention_dropout": config.attn_dropout,
        "initializer_range": config.init_std,
        "tie_word_embeddings": config.tie_embeddings,
    }


def llama_config(hf: Any) -> ModelConfig:
    require_field(
        hf, "mlp_bias", hf.attention_bias, "xfmr has one `bias` for attention and the FFN"
    )
    return _decoder(hf, bias=hf.attention_bias)


def llama_hf_config(config: ModelConfig) -> dict[str, Any]:
    return {**_hf_decoder(config), "attention_bias": config.bias, "mlp_bias": config.bias}


def mistral_config(hf: Any) -> ModelConfig:
    """Mistral: Llama without biases, every layer windowed by `sliding_window` (None: none)."""
    return _decoder(hf, window=hf.sliding_window)


def mistral_hf_config(config: ModelConfig) -> dict[str, Any]:
    return {**_hf_decoder(config), "sliding_window": config.window}


def qwen3_config(hf: Any) -> ModelConfig:
    """Qwen3: Llama with q and k RMS-normalised per head, and windows by `layer_types`."""
    require_field(hf, "attention_bias", False, "Qwen3's MLP has no biases; xfmr has one `bias`")
    return _decoder(hf, qk_norm="rmsnorm", **window_pattern(hf))


def qwen3_hf_config(config: ModelConfig) -> dict[str, Any]:
    types = layer_types(config)
    return {
        **_hf_decoder(config),
        "attention_bias": False,
        "use_sliding_window": config.window is not None,
        "sliding_window": config.window,
        # Qwen3 slides layers i >= max_window_layers unless `layer_types` says otherwise, as here
        "max_window_layers": types.index(SLIDING) if SLIDING in types else config.n_layers,
        "layer_types": types,
    }


def gemma2_config(hf: Any) -> ModelConfig:
    """Gemma 2: sandwich norms, embeddings * sqrt(d_model), scores * query_pre_attn_scalar**-0.5
    (which must be head_dim's), soft-capped scores and logits, windows by `layer_types`."""
    head_dim = hf.hidden_size // hf.num_attention_heads
    require_field(
        hf, "query_pre_attn_scalar", head_dim, f"xfmr scales scores by head_dim**-0.5 ({head_dim})"
    )
    require_field(hf, "attention_bias", False, "Gemma 2's MLP has no biases; xfmr has one `bias`")
    if getattr(hf, "use_bidirectional_attention", None):
        raise ValueError(
            "gemma2 use_bidirectional_attention=True is not supported: xfmr's decoder is causal"
        )
    caps = (hf.attn_logit_softcapping, hf.final_logit_softcapping)
    attn_cap, logit_cap = (None if cap is None else float(cap) for cap in caps)
    return _decoder(
        hf,
        activation_field="hidden_activation",
        placement="sandwich",
        embed_scale=True,
        attn_softcap=attn_cap,
        logit_softcap=logit_cap,
        **window_pattern(hf),
    )


def gemma2_hf_config(config: ModelConfig) -> dict[str, Any]:
    decoder = _hf_decoder(config, activation_field="hidden_activation")
    return {
        **decoder,
        "query_pre_attn_scalar": config.head_dim,
        "attention_bias": False,
        # transformers builds the sliding mask even where no layer slides: give it a window then
        "sliding_window": config.window or decoder["max_position_embeddings"],
        "layer_types": layer_types(config),
        "attn_logit_softcapping": config.attn_softcap,
        "final_logit_softcapping": config.logit_softcap,
    }
