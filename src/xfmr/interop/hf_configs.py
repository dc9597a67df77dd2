"""Hugging Face configs -> xfmr ModelConfigs, one function per family (GPT-2, BERT, T5).

A setting xfmr cannot reproduce is refused with a ValueError naming the HF field and its value.
"""

from __future__ import annotations

from typing import Any

from xfmr.nn.config import ModelConfig, PosConfig

# HF `ACT2FN` name -> xfmr activation. HF's "gelu" is the exact erf form; "gelu_new" (GPT-2) and
# "gelu_pytorch_tanh" are the tanh approximation.
HF_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
# T5 `feed_forward_proj` -> xfmr activation. HF reads "gated-gelu" as gelu_new (tanh), for
# compatibility with the T5 v1.1 checkpoints.
T5_FEED_FORWARD = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gated-gelu": "geglu_tanh",
    "gated-gelu_new": "geglu_tanh",
    "gated-silu": "swiglu",
}


def _require(hf_config: Any, field: str, expected: Any, why: str) -> None:
    value = getattr(hf_config, field, expected)
    if value != expected:
        raise ValueError(f"{hf_config.model_type} {field}={value!r} is not supported: {why}")


def _activation(hf_config: Any, field: str, table: dict[str, str]) -> str:
    value = getattr(hf_config, field)
    if not isinstance(value, str) or value not in table:
        raise ValueError(
            f"{hf_config.model_type} {field}={value!r} is not supported: xfmr maps {sorted(table)}"
        )
    return table[value]


def gpt2_config(hf: Any) -> ModelConfig:
    _require(hf, "add_cross_attention", False, "xfmr's decoder-only stack has no cross-attention")
    _require(hf, "scale_attn_by_inverse_layer_idx", False, "xfmr scales every layer alike")
    # reorder_and_upcast_attn only changes mixed-precision numerics (SDPA softmaxes in fp32 anyway).
    if hf.embd_pdrop != hf.resid_pdrop:
        raise ValueError(
            f"gpt2 embd_pdrop={hf.embd_pdrop!r} with resid_pdrop={hf.resid_pdrop!r} is not "
            f"supported: xfmr has one `dropout` for embeddings and residual branches"
        )
    return ModelConfig(
        vocab_size=hf.vocab_size,
        arch="decoder",
        n_layers=hf.n_layer,
        n_heads=hf.n_head,
        d_model=hf.n_embd,
        d_ff=hf.n_inner,  # None: 4 * d_model, as in GPT-2
        dropout=hf.resid_pdrop,
        attn_dropout=hf.attn_pdrop,
        activation=_activation(hf, "activation_function", HF_ACTIVATIONS),
        norm="layernorm",
        norm_eps=hf.layer_norm_epsilon,
        placement="pre",
        bias=True,
        tie_embeddings=hf.tie_word_embeddings,
        init_std=hf.initializer_range,
        attn_scale=hf.scale_attn_weights,
        pos=PosConfig(name="learned", max_positions=hf.n_positions),
    )


def bert_config(hf: Any) -> ModelConfig:
    _require(hf, "is_decoder", False, "xfmr's encoder attends both ways")
    _require(hf, "add_cross_attention", False, "xfmr's encoder has no cross-attention")
    _require(hf, "position_embedding_type", "absolute", "xfmr maps learned absolute positions")
    # Untied, HF's forward adds `cls.predictions.decoder.bias` and never reads
    # `cls.predictions.bias`; xfmr's MLM head has the one output bias.
    _require(hf, "tie_word_embeddings", True, "xfmr maps BERT's tied MLM decoder")
    return ModelConfig(
        vocab_size=hf.vocab_size,
        arch="encoder",
        n_layers=hf.num_hidden_layers,
        n_heads=hf.num_attention_heads,
        d_model=hf.hidden_size,
        d_ff=hf.intermediate_size,
        dropout=hf.hidden_dropout_prob,
        attn_dropout=hf.attention_probs_dropout_prob,
        activation=_activation(hf, "hidden_act", HF_ACTIVATIONS),
        norm="layernorm",
        norm_eps=hf.layer_norm_eps,
        placement="post",
        bias=True,
        tie_embeddings=True,
        init_std=hf.initializer_range,
        type_vocab_size=hf.type_vocab_size,
        embed_norm=True,
        pos=PosConfig(name="learned", max_positions=hf.max_position_embeddings),
    )


def t5_config(hf: Any) -> ModelConfig:
    if hf.d_kv * hf.num_heads != hf.d_model:
        raise ValueError(
            f"t5 d_kv={hf.d_kv} * num_heads={hf.num_heads} = {hf.d_kv * hf.num_heads} is not "
            f"d_model={hf.d_model}: xfmr's attention width is d_model, so d_kv must be "
            f"d_model / num_heads"
        )
    # T5 v1 ties the LM head to the shared embedding and scales the decoder output by
    # d_model**-0.5; v1.1 does neither. transformers >= 5 forces `tie_word_embeddings=True` on
    # T5 and keeps the checkpoint's flag as `scale_decoder_outputs`.
    v1 = getattr(hf, "scale_decoder_outputs", hf.tie_word_embeddings)
    return ModelConfig(
        vocab_size=hf.vocab_size,
        arch="encoder_decoder",
        n_layers=hf.num_layers,
        n_decoder_layers=hf.num_decoder_layers,
        n_heads=hf.num_heads,
        d_model=hf.d_model,
        d_ff=hf.d_ff,
        # T5 also drops out inside the FFN and after each final norm; xfmr does not (train only).
        dropout=hf.dropout_rate,
        attn_dropout=hf.dropout_rate,
        activation=_activation(hf, "feed_forward_proj", T5_FEED_FORWARD),
        norm="rmsnorm",
        norm_eps=hf.layer_norm_epsilon,
        placement="pre",
        bias=False,
        attn_scale=False,  # Raffel et al. 2020: the 1/sqrt(d_kv) is folded into the init
        tie_embeddings=v1,
        share_embeddings=True,
        scale_logits=v1,
        pos=PosConfig(
            name="relative",
            max_positions=None,
            num_buckets=hf.relative_attention_num_buckets,
            max_distance=hf.relative_attention_max_distance,
        ),
    )
