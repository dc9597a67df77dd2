"""Hugging Face configs <-> xfmr ModelConfigs, two functions per family (GPT-2, BERT, T5; the
rotary decoders of the Llama line are in `hf_configs_llama`): `<family>_config` reads an HF
config, `<family>_hf_config` writes one, side by side so a field's name and meaning are stated
in one place.

A setting xfmr cannot reproduce is refused with a ValueError naming the HF field and its value;
which xfmr settings each family represents is `xfmr.interop.hf_families`' business.

An HF `vocab_size` is the model's rows (`ModelConfig.padded_vocab_size`): a model trained with
`model.vocab_multiple` exports them all and reads back as that many tokens at vocab_multiple 1,
as GPT-2 exported from nanoGPT (50,304 rows for 50,257 tokens) does.
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
    "gated-gelu_python": "geglu",  # HF rewrites "gated-gelu" to the tanh form; this is exact
}


def hf_name(table: dict[str, str], activation: str) -> str:
    """The HF name of xfmr `activation` in `table` (the first that reads back as it)."""
    return next(name for name, ours in table.items() if ours == activation)


def require_field(hf_config: Any, field: str, expected: Any, why: str) -> None:
    value = getattr(hf_config, field, expected)
    if value != expected:
        raise ValueError(f"{hf_config.model_type} {field}={value!r} is not supported: {why}")


def read_activation(hf_config: Any, field: str, table: dict[str, str]) -> str:
    value = getattr(hf_config, field)
    if not isinstance(value, str) or value not in table:
        raise ValueError(
            f"{hf_config.model_type} {field}={value!r} is not supported: xfmr maps {sorted(table)}"
        )
    return table[value]


def gpt2_config(hf: Any) -> ModelConfig:
    require_field(
        hf, "add_cross_attention", False, "xfmr's decoder-only stack has no cross-attention"
    )
    require_field(hf, "scale_attn_by_inverse_layer_idx", False, "xfmr scales every layer alike")
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
        activation=read_activation(hf, "activation_function", HF_ACTIVATIONS),
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
    require_field(hf, "is_decoder", False, "xfmr's encoder attends both ways")
    require_field(hf, "add_cross_attention", False, "xfmr's encoder has no cross-attention")
    require_field(hf, "position_embedding_type", "absolute", "xfmr maps learned absolute positions")
    # Untied, HF's forward adds `cls.predictions.decoder.bias` and never reads
    # `cls.predictions.bias`; xfmr's MLM head has the one output bias.
    require_field(hf, "tie_word_embeddings", True, "xfmr maps BERT's tied MLM decoder")
    return ModelConfig(
        vocab_size=hf.vocab_size,
        arch="encoder",
        n_layers=hf.num_hidden_layers,
        n_heads=hf.num_attention_heads,
        d_model=hf.hidden_size,
        d_ff=hf.intermediate_size,
        dropout=hf.hidden_dropout_prob,
        attn_dropout=hf.attention_probs_dropout_prob,
        activation=read_activation(hf, "hidden_act", HF_ACTIVATIONS),
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
        activation=read_activation(hf, "feed_forward_proj", T5_FEED_FORWARD),
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


def gpt2_hf_config(config: ModelConfig) -> dict[str, Any]:
    return dict(
        vocab_size=config.padded_vocab_size,
        n_positions=config.pos.max_positions,
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        activation_function=hf_name(HF_ACTIVATIONS, config.activation),
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.attn_dropout,
        layer_norm_epsilon=config.norm_eps,
        initializer_range=config.init_std,
        scale_attn_weights=config.attn_scale,
        tie_word_embeddings=config.tie_embeddings,
    )


def bert_hf_config(config: ModelConfig) -> dict[str, Any]:
    """Segment embeddings: at least one (BERT always adds segment 0's, zeros for a model
    without them)."""
    return dict(
        vocab_size=config.padded_vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        hidden_act=hf_name(HF_ACTIVATIONS, config.activation),
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attn_dropout,
        classifier_dropout=config.dropout,
        max_position_embeddings=config.pos.max_positions,
        type_vocab_size=max(1, config.type_vocab_size),
        layer_norm_eps=config.norm_eps,
        initializer_range=config.init_std,
        tie_word_embeddings=True,
    )


def t5_hf_config(config: ModelConfig) -> dict[str, Any]:
    """v1 (tied, scaled output) or v1.1 (neither): `tie_word_embeddings` says which."""
    return dict(
        vocab_size=config.padded_vocab_size,
        d_model=config.d_model,
        d_kv=config.head_dim,
        d_ff=config.d_ff,
        num_layers=config.n_layers,
        num_decoder_layers=config.n_decoder_layers,
        num_heads=config.n_heads,
        relative_attention_num_buckets=config.pos.num_buckets,
        relative_attention_max_distance=config.pos.max_distance,
        dropout_rate=config.dropout,
        layer_norm_epsilon=config.norm_eps,
        feed_forward_proj=hf_name(T5_FEED_FORWARD, config.activation),
        initializer_factor=1.0,
        tie_word_embeddings=config.tie_embeddings,
    )
