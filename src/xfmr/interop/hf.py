"""Hugging Face interop: GPT-2, BERT and T5 checkpoints as xfmr models, weight for weight.

    config_from_hf(hf_config)  -> ModelConfig        the xfmr shape of an HF config
    from_hf(hf_model)          -> xfmr model         build it and copy every weight
    load_pretrained(path)      -> xfmr model         the same from a local checkpoint directory
    load_into(model, path)     -> model              copy a checkpoint into a model already built

Each family has a config function and a weights function that writes the state-dict mapping out
name by name; `_Source` records which HF tensors a mapping took, so a weight left over on either
side is an error that lists it. `transformers` is imported only inside the functions that read a
checkpoint from disk; `from_hf` needs only the model object.

Settings xfmr cannot reproduce are refused with a ValueError naming the HF field and its value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.heads import EncoderPretraining
from xfmr.nn.layers import ACTIVATIONS
from xfmr.nn.models import CausalLM

__all__ = [
    "FAMILIES",
    "config_from_hf",
    "config_differences",
    "from_hf",
    "load_into",
    "load_pretrained",
]

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


# --- configs ---------------------------------------------------------------------------------


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


def _gpt2_config(hf: Any) -> ModelConfig:
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


def _bert_config(hf: Any) -> ModelConfig:
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


def _t5_config(hf: Any) -> ModelConfig:
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


# --- weights ---------------------------------------------------------------------------------

Weights = dict[str, torch.Tensor]


class _Source:
    """An HF state dict that records the keys a mapping takes, so leftovers can be listed."""

    def __init__(self, state: Weights) -> None:
        self.state = state
        self.taken: set[str] = set()

    def __call__(self, key: str) -> torch.Tensor:
        if key not in self.state:
            raise ValueError(f"the Hugging Face model has no weight {key!r}")
        self.taken.add(key)
        return self.state[key]

    def cat(self, *keys: str) -> torch.Tensor:
        """Stack Linear weights (out, in) or biases (out,) along the output dim, in this order."""
        return torch.cat([self(key) for key in keys], dim=0)

    def alias(self, key: str, *, of: str) -> None:
        """`key` is a second name HF gives the tensor `of` (a tie); it must hold the same values."""
        if not torch.equal(self(key), self(of)):
            raise ValueError(f"{key!r} should be tied to {of!r} but their values differ")

    def leftovers(self) -> list[str]:
        return sorted(set(self.state) - self.taken)


def _weight_and_bias(hf: _Source, ours: str, theirs: str) -> Weights:
    return {f"{ours}.weight": hf(f"{theirs}.weight"), f"{ours}.bias": hf(f"{theirs}.bias")}


def _gpt2_weights(hf: _Source, config: ModelConfig) -> Weights:
    weights = {
        "backbone.tok_emb.weight": hf("transformer.wte.weight"),
        "backbone.pos.embedding.weight": hf("transformer.wpe.weight"),
        **_weight_and_bias(hf, "backbone.final_norm", "transformer.ln_f"),
        "lm_head.weight": hf("lm_head.weight"),
    }
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"transformer.h.{i}"
        # GPT-2's Conv1D stores (in, out); nn.Linear wants (out, in). c_attn's outputs are
        # [q | k | v], the order our fused qkv splits in.
        weights |= {
            **_weight_and_bias(hf, f"{ours}.attn_norm", f"{theirs}.ln_1"),
            f"{ours}.attn.qkv.weight": hf(f"{theirs}.attn.c_attn.weight").t(),
            f"{ours}.attn.qkv.bias": hf(f"{theirs}.attn.c_attn.bias"),
            f"{ours}.attn.out.weight": hf(f"{theirs}.attn.c_proj.weight").t(),
            f"{ours}.attn.out.bias": hf(f"{theirs}.attn.c_proj.bias"),
            **_weight_and_bias(hf, f"{ours}.ffn_norm", f"{theirs}.ln_2"),
            f"{ours}.ffn.up.weight": hf(f"{theirs}.mlp.c_fc.weight").t(),
            f"{ours}.ffn.up.bias": hf(f"{theirs}.mlp.c_fc.bias"),
            f"{ours}.ffn.down.weight": hf(f"{theirs}.mlp.c_proj.weight").t(),
            f"{ours}.ffn.down.bias": hf(f"{theirs}.mlp.c_proj.bias"),
        }
    return weights


def _bert_weights(hf: _Source, config: ModelConfig) -> Weights:
    weights = {
        "backbone.tok_emb.weight": hf("bert.embeddings.word_embeddings.weight"),
        "backbone.type_emb.weight": hf("bert.embeddings.token_type_embeddings.weight"),
        "backbone.pos.embedding.weight": hf("bert.embeddings.position_embeddings.weight"),
        **_weight_and_bias(hf, "backbone.embed_norm", "bert.embeddings.LayerNorm"),
        **_weight_and_bias(hf, "mlm.dense", "cls.predictions.transform.dense"),
        **_weight_and_bias(hf, "mlm.norm", "cls.predictions.transform.LayerNorm"),
        "mlm.decoder.weight": hf("cls.predictions.decoder.weight"),
        "mlm.bias": hf("cls.predictions.bias"),
        **_weight_and_bias(hf, "pooler.dense", "bert.pooler.dense"),
        **_weight_and_bias(hf, "nsp.proj", "cls.seq_relationship"),
    }
    hf.alias("cls.predictions.decoder.bias", of="cls.predictions.bias")
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"bert.encoder.layer.{i}"
        attention = f"{theirs}.attention"
        # Post-LN: the LayerNorm after attention is our attn_norm, the one after the FFN ffn_norm.
        weights |= {
            f"{ours}.attn.qkv.weight": hf.cat(
                *(f"{attention}.self.{name}.weight" for name in ("query", "key", "value"))
            ),
            f"{ours}.attn.qkv.bias": hf.cat(
                *(f"{attention}.self.{name}.bias" for name in ("query", "key", "value"))
            ),
            **_weight_and_bias(hf, f"{ours}.attn.out", f"{attention}.output.dense"),
            **_weight_and_bias(hf, f"{ours}.attn_norm", f"{attention}.output.LayerNorm"),
            **_weight_and_bias(hf, f"{ours}.ffn.up", f"{theirs}.intermediate.dense"),
            **_weight_and_bias(hf, f"{ours}.ffn.down", f"{theirs}.output.dense"),
            **_weight_and_bias(hf, f"{ours}.ffn_norm", f"{theirs}.output.LayerNorm"),
        }
    return weights


def _t5_self_attention(hf: _Source, ours: str, theirs: str) -> Weights:
    """T5LayerSelfAttention `theirs` -> the attention half of our Block `ours`."""
    return {
        f"{ours}.attn_norm.weight": hf(f"{theirs}.layer_norm.weight"),
        f"{ours}.attn.qkv.weight": hf.cat(
            *(f"{theirs}.SelfAttention.{name}.weight" for name in ("q", "k", "v"))
        ),
        f"{ours}.attn.out.weight": hf(f"{theirs}.SelfAttention.o.weight"),
    }


def _t5_cross_attention(hf: _Source, ours: str, theirs: str) -> Weights:
    """T5LayerCrossAttention `theirs` -> our Block's cross-attention (fused [k | v])."""
    return {
        f"{ours}.cross_norm.weight": hf(f"{theirs}.layer_norm.weight"),
        f"{ours}.cross_attn.q.weight": hf(f"{theirs}.EncDecAttention.q.weight"),
        f"{ours}.cross_attn.kv.weight": hf.cat(
            f"{theirs}.EncDecAttention.k.weight", f"{theirs}.EncDecAttention.v.weight"
        ),
        f"{ours}.cross_attn.out.weight": hf(f"{theirs}.EncDecAttention.o.weight"),
    }


def _t5_feed_forward(hf: _Source, ours: str, theirs: str, *, gated: bool) -> Weights:
    """T5LayerFF `theirs` -> our Block's FFN. Gated: `up` is [wi_0 (gate) | wi_1 (value)]."""
    dense = f"{theirs}.DenseReluDense"
    up = (
        hf.cat(f"{dense}.wi_0.weight", f"{dense}.wi_1.weight")
        if gated
        else hf(f"{dense}.wi.weight")
    )
    return {
        f"{ours}.ffn_norm.weight": hf(f"{theirs}.layer_norm.weight"),
        f"{ours}.ffn.up.weight": up,
        f"{ours}.ffn.down.weight": hf(f"{dense}.wo.weight"),
    }


def _t5_weights(hf: _Source, config: ModelConfig) -> Weights:
    # Layer 0 of each stack owns the relative bias and every layer of that stack reuses it; our
    # stacks own theirs directly. Cross-attention has none.
    bias = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    weights = {
        "encoder.tok_emb.weight": hf("encoder.embed_tokens.weight"),
        "encoder.pos.embedding.weight": hf(f"encoder.{bias}"),
        "encoder.final_norm.weight": hf("encoder.final_layer_norm.weight"),
        "decoder.tok_emb.weight": hf("decoder.embed_tokens.weight"),
        "decoder.pos.embedding.weight": hf(f"decoder.{bias}"),
        "decoder.final_norm.weight": hf("decoder.final_layer_norm.weight"),
        "lm_head.weight": hf("lm_head.weight"),
    }
    hf.alias("shared.weight", of="encoder.embed_tokens.weight")
    gated = ACTIVATIONS[config.activation].gated
    for i in range(config.n_layers):
        ours, theirs = f"encoder.blocks.{i}", f"encoder.block.{i}.layer"
        weights |= _t5_self_attention(hf, ours, f"{theirs}.0")
        weights |= _t5_feed_forward(hf, ours, f"{theirs}.1", gated=gated)
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.blocks.{i}", f"decoder.block.{i}.layer"
        weights |= _t5_self_attention(hf, ours, f"{theirs}.0")
        weights |= _t5_cross_attention(hf, ours, f"{theirs}.1")
        weights |= _t5_feed_forward(hf, ours, f"{theirs}.2", gated=gated)
    return weights


# --- families --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One supported model family: the HF class `from_hf` takes, the transformers Auto class that
    loads it from disk, the xfmr model it becomes, and its config and weight mappings."""

    hf_class: str
    auto_class: str
    model: type[nn.Module]
    config: Callable[[Any], ModelConfig]
    weights: Callable[[_Source, ModelConfig], Weights]


# HF `model_type` -> family.
FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        hf_class="GPT2LMHeadModel",
        auto_class="AutoModelForCausalLM",
        model=CausalLM,
        config=_gpt2_config,
        weights=_gpt2_weights,
    ),
    "bert": Family(
        hf_class="BertForPreTraining",
        auto_class="AutoModelForPreTraining",
        model=EncoderPretraining,
        config=_bert_config,
        weights=_bert_weights,
    ),
    "t5": Family(
        hf_class="T5ForConditionalGeneration",
        auto_class="AutoModelForSeq2SeqLM",
        model=EncoderDecoder,
        config=_t5_config,
        weights=_t5_weights,
    ),
}


def _family(model_type: str) -> Family:
    if model_type not in FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} is not supported: xfmr maps {sorted(FAMILIES)}"
        )
    return FAMILIES[model_type]


def _family_of(hf_model: nn.Module) -> Family:
    family = _family(hf_model.config.model_type)
    if type(hf_model).__name__ != family.hf_class:
        supported = [f.hf_class for f in FAMILIES.values()]
        raise ValueError(f"from_hf takes one of {supported}, got {type(hf_model).__name__}")
    return family


# --- public API ------------------------------------------------------------------------------


# Fields a fine-tuning run may choose for itself: they change training, not the function.
TRAINING_ONLY = ("dropout", "attn_dropout", "init_std")


def hf_model_config(path: str | Path, **training: Any) -> ModelConfig:
    """The ModelConfig of the checkpoint in local directory `path`, with `training` (some of
    TRAINING_ONLY, e.g. a fine-tuning run's dropout) replacing the checkpoint's values."""
    unknown = sorted(set(training) - set(TRAINING_ONLY))
    if unknown:
        raise ValueError(f"{unknown} are not training-only fields; those are {list(TRAINING_ONLY)}")
    return replace(config_from_hf(_load_hf_config(path)), **training)


def config_from_hf(hf_config: Any) -> ModelConfig:
    """The ModelConfig of a transformers GPT2Config, BertConfig or T5Config.

    Raises:
        ValueError: naming the HF field and value xfmr cannot reproduce.
    """
    return _family(hf_config.model_type).config(hf_config)


def config_differences(ours: ModelConfig, theirs: ModelConfig) -> list[tuple[str, Any, Any]]:
    """(field, ours, theirs) for every field that differs; `pos` fields as `pos.name` etc."""
    flat_ours, flat_theirs = _flatten(asdict(ours)), _flatten(asdict(theirs))
    return [
        (key, flat_ours[key], flat_theirs[key])
        for key in flat_ours
        if flat_ours[key] != flat_theirs[key]
    ]


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def from_hf(hf_model: nn.Module) -> nn.Module:
    """The xfmr model equivalent to `hf_model` (GPT2LMHeadModel, BertForPreTraining or
    T5ForConditionalGeneration), holding a float32 copy of every one of its weights.

    The result is in the same train/eval mode as `hf_model`.

    Raises:
        ValueError: an unsupported class or setting, or a weight left unmapped on either side.
    """
    family = _family_of(hf_model)
    model = family.model(config_from_hf(hf_model.config))
    _copy_weights(model, family, hf_model)
    return model.train(hf_model.training)


def load_pretrained(path: str | Path) -> nn.Module:
    """`from_hf` of the checkpoint in local directory `path` (config.json and weights, as written
    by `save_pretrained`). Nothing is downloaded."""
    return from_hf(_load_hf_model(path, _load_hf_config(path)))


def load_into(model: nn.Module, path: str | Path) -> nn.Module:
    """Copy the checkpoint in local directory `path` into `model`, which must be the xfmr class
    `from_hf` builds for it, with a ModelConfig equal to the checkpoint's `config_from_hf`.

    Returns `model`, its weights replaced.

    Raises:
        ValueError: the wrong model class, or config fields that differ (each listed with both
            values), or a weight left unmapped on either side.
    """
    hf_config = _load_hf_config(path)
    family = _family(hf_config.model_type)
    if not isinstance(model, family.model):
        raise ValueError(
            f"{path} holds a {family.hf_class}, which loads into {family.model.__name__}, "
            f"not {type(model).__name__}"
        )
    differences = [
        d
        for d in config_differences(model.config, config_from_hf(hf_config))
        if d[0] not in TRAINING_ONLY
    ]
    if differences:
        listed = "; ".join(
            f"{key}={ours!r} (checkpoint: {theirs!r})" for key, ours, theirs in differences
        )
        raise ValueError(f"the model's config differs from the checkpoint at {path}: {listed}")
    _copy_weights(model, family, _load_hf_model(path, hf_config))
    return model


def _copy_weights(model: nn.Module, family: Family, hf_model: nn.Module) -> None:
    """Map `hf_model`'s state dict with `family.weights` and copy it into `model`, refusing
    leftovers on either side, shape mismatches, and a tie in `model` the checkpoint lacks."""
    source = _Source(hf_model.state_dict())
    weights = family.weights(source, model.config)
    target = model.state_dict()  # tensors that share storage with model's parameters
    problems = []
    if leftovers := source.leftovers():
        problems.append(f"{type(hf_model).__name__} weights mapped to nothing: {leftovers}")
    if unset := sorted(set(target) - set(weights)):
        problems.append(f"{type(model).__name__} weights given no value: {unset}")
    if unknown := sorted(set(weights) - set(target)):
        problems.append(f"mapped names {type(model).__name__} does not have: {unknown}")
    problems += [
        f"{name}: shape {tuple(tensor.shape)} from the checkpoint, {tuple(target[name].shape)} in xfmr"
        for name, tensor in weights.items()
        if name in target and tensor.shape != target[name].shape
    ]
    if problems:
        raise ValueError("cannot map the weights: " + "; ".join(problems))
    _check_shared(model, target, weights)
    with torch.no_grad():
        for name, tensor in weights.items():
            target[name].copy_(tensor)


def _check_shared(model: nn.Module, target: Weights, weights: Weights) -> None:
    """A tensor `model` holds under several names (a tied or shared embedding) takes one value:
    the checkpoint must give every name the same one."""
    names_by_tensor: dict[int, list[str]] = {}
    for name in weights:
        names_by_tensor.setdefault(target[name].data_ptr(), []).append(name)
    for names in names_by_tensor.values():
        if any(not torch.equal(weights[names[0]], weights[name]) for name in names[1:]):
            raise ValueError(
                f"{names} are one tensor in {type(model).__name__} but the checkpoint gives them "
                f"different values (untied weights); build the model untied"
            )


def _load_hf_config(path: str | Path) -> Any:
    import transformers

    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face checkpoint directory: no config.json"
        )
    return transformers.AutoConfig.from_pretrained(path, local_files_only=True)


def _load_hf_model(path: str | Path, hf_config: Any) -> nn.Module:
    import transformers

    family = _family(hf_config.model_type)
    auto_class = getattr(transformers, family.auto_class)
    hf_model, info = auto_class.from_pretrained(
        path, config=hf_config, local_files_only=True, output_loading_info=True
    )
    if info["missing_keys"]:
        raise ValueError(
            f"the checkpoint at {path} lacks {sorted(info['missing_keys'])}, which "
            f"{family.hf_class} needs (transformers would initialise them at random)"
        )
    return hf_model
