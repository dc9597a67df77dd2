"""Hugging Face state dicts -> xfmr state dicts, one function per family writing the mapping out
name by name, and the copy of a mapped state dict into a model. `Source` records which HF
tensors a mapping took, so a weight left over on either side is an error that lists it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.layers import ACTIVATIONS

Weights = dict[str, torch.Tensor]


class Source:
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


def _weight_and_bias(hf: Source, ours: str, theirs: str) -> Weights:
    return {f"{ours}.weight": hf(f"{theirs}.weight"), f"{ours}.bias": hf(f"{theirs}.bias")}


def gpt2_weights(hf: Source, config: ModelConfig) -> Weights:
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


def bert_weights(hf: Source, config: ModelConfig) -> Weights:
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


def _t5_self_attention(hf: Source, ours: str, theirs: str) -> Weights:
    """T5LayerSelfAttention `theirs` -> the attention half of our Block `ours`."""
    return {
        f"{ours}.attn_norm.weight": hf(f"{theirs}.layer_norm.weight"),
        f"{ours}.attn.qkv.weight": hf.cat(
            *(f"{theirs}.SelfAttention.{name}.weight" for name in ("q", "k", "v"))
        ),
        f"{ours}.attn.out.weight": hf(f"{theirs}.SelfAttention.o.weight"),
    }


def _t5_cross_attention(hf: Source, ours: str, theirs: str) -> Weights:
    """T5LayerCrossAttention `theirs` -> our Block's cross-attention (fused [k | v])."""
    return {
        f"{ours}.cross_norm.weight": hf(f"{theirs}.layer_norm.weight"),
        f"{ours}.cross_attn.q.weight": hf(f"{theirs}.EncDecAttention.q.weight"),
        f"{ours}.cross_attn.kv.weight": hf.cat(
            f"{theirs}.EncDecAttention.k.weight", f"{theirs}.EncDecAttention.v.weight"
        ),
        f"{ours}.cross_attn.out.weight": hf(f"{theirs}.EncDecAttention.o.weight"),
    }


def _t5_feed_forward(hf: Source, ours: str, theirs: str, *, gated: bool) -> Weights:
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


def t5_weights(hf: Source, config: ModelConfig) -> Weights:
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


def copy_weights(
    model: nn.Module, mapping: Callable[[Source, ModelConfig], Weights], hf_model: nn.Module
) -> None:
    """Map `hf_model`'s state dict with `mapping` (a family's weights function) and copy it into
    `model`, refusing leftovers on either side, shape mismatches, and a tie in `model` the
    checkpoint lacks."""
    source = Source(hf_model.state_dict())
    weights = mapping(source, model.config)
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
