"""Hugging Face state dicts <-> xfmr state dicts: one `Table` per family writes the mapping out
name by name, and reads both ways (`read_table` imports, `write_table` exports), so a name or a
transpose is stated once. `Source` records which HF tensors an import took, so a weight left
over on either side is an error that lists it."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class Link:
    """One xfmr tensor and the Hugging Face tensor(s) it is. Several HF names are stacked along
    dim 0 in that order (a fused [q | k | v]); `transpose` for GPT-2's Conv1D, stored (in, out);
    `shift`: HF's tensor is ours + shift (Gemma's RMSNorm multiplies by 1 + weight: -1)."""

    ours: str
    theirs: tuple[str, ...]
    transpose: bool = False
    sizes: tuple[int, ...] | None = None  # each HF tensor's rows, where they differ (GQA's k, v)
    shift: float = 0.0


@dataclass
class Table:
    """A family's state-dict mapping, read both ways: `links` pair xfmr and HF names, `aliases`
    are second HF names of one tensor (a tie: name -> the name it repeats), and `zeros` are HF
    tensors xfmr does not have (a bias the model was built without), written as zeros."""

    links: list[Link] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    zeros: list[str] = field(default_factory=list)

    def link(
        self,
        ours: str,
        *theirs: str,
        transpose: bool = False,
        sizes: tuple[int, ...] | None = None,
        shift: float = 0.0,
    ) -> None:
        self.links.append(Link(ours, theirs, transpose, sizes, shift))

    def weight_and_bias(self, ours: str, theirs: str, *, bias: bool = True) -> None:
        """`ours.weight` is `theirs.weight`; the biases likewise, or zeros on HF's side."""
        self.link(f"{ours}.weight", f"{theirs}.weight")
        if bias:
            self.link(f"{ours}.bias", f"{theirs}.bias")
        else:
            self.zeros.append(f"{theirs}.bias")

    def fused(
        self,
        ours: str,
        theirs: list[str],
        *,
        bias: bool = True,
        sizes: tuple[int, ...] | None = None,
    ) -> None:
        """`ours` (weight, bias) stacks the Linear layers `theirs` along the output dim, of
        `sizes` rows each (None: equal)."""
        self.link(f"{ours}.weight", *(f"{name}.weight" for name in theirs), sizes=sizes)
        if bias:
            self.link(f"{ours}.bias", *(f"{name}.bias" for name in theirs), sizes=sizes)
        else:
            self.zeros += [f"{name}.bias" for name in theirs]


def read_table(table: Table, hf: Source, *, partial: bool = False) -> Weights:
    """HF -> xfmr: each link's tensor from `hf`. `partial`: links whose HF tensors the
    checkpoint lacks are left out (a head it does not have) instead of refused."""
    weights = {}
    for link in table.links:
        if partial and not all(name in hf.state for name in link.theirs):
            continue
        tensor = hf(link.theirs[0]) if len(link.theirs) == 1 else hf.cat(*link.theirs)
        tensor = tensor - link.shift if link.shift else tensor
        weights[link.ours] = tensor.t() if link.transpose else tensor
    for name, of in table.aliases.items():
        if not partial or (name in hf.state and of in hf.state):
            hf.alias(name, of=of)
    return weights


def write_table(table: Table, weights: Weights) -> Weights:
    """xfmr -> HF: the state dict a Hugging Face model of the family loads, zeros aside (their
    shapes are the HF model's: `xfmr.interop.hf_export` fills them)."""
    hf: Weights = {}
    for link in table.links:
        tensor = weights[link.ours]
        tensor = tensor + link.shift if link.shift else tensor
        tensor = tensor.t() if link.transpose else tensor
        parts = tensor.split(link.sizes) if link.sizes else tensor.chunk(len(link.theirs))
        for name, part in zip(link.theirs, parts, strict=True):
            hf[name] = part.contiguous()
    for name, of in table.aliases.items():
        hf[name] = hf[of]
    return hf


def gpt2_table(config: ModelConfig) -> Table:
    bias = config.bias  # GPT-2 always has biases: a model without them writes zeros
    table = Table()
    table.link("backbone.tok_emb.weight", "transformer.wte.weight")
    table.link("backbone.pos.embedding.weight", "transformer.wpe.weight")
    table.weight_and_bias("backbone.final_norm", "transformer.ln_f", bias=bias)
    table.link("lm_head.weight", "lm_head.weight")
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"transformer.h.{i}"
        table.weight_and_bias(f"{ours}.attn_norm", f"{theirs}.ln_1", bias=bias)
        table.weight_and_bias(f"{ours}.ffn_norm", f"{theirs}.ln_2", bias=bias)
        # GPT-2's Conv1D stores (in, out); nn.Linear wants (out, in). c_attn's outputs are
        # [q | k | v], the order our fused qkv splits in.
        for ours_name, conv in [
            ("attn.qkv", "attn.c_attn"),
            ("attn.out", "attn.c_proj"),
            ("ffn.up", "mlp.c_fc"),
            ("ffn.down", "mlp.c_proj"),
        ]:
            table.link(f"{ours}.{ours_name}.weight", f"{theirs}.{conv}.weight", transpose=True)
            if bias:
                table.link(f"{ours}.{ours_name}.bias", f"{theirs}.{conv}.bias")
            else:
                table.zeros.append(f"{theirs}.{conv}.bias")
    return table


def _stacked(
    table: Table,
    ours: str,
    theirs: list[str],
    *,
    bias: bool,
    sizes: tuple[int, ...] | None = None,
) -> None:
    """Our Linear `ours` is the HF Linear layers `theirs` stacked along the output dim; their
    biases too where `bias` (the Llama line's classes have no bias tensors to write zeros to)."""
    table.link(f"{ours}.weight", *(f"{name}.weight" for name in theirs), sizes=sizes)
    if bias:
        table.link(f"{ours}.bias", *(f"{name}.bias" for name in theirs), sizes=sizes)


def _llama_layer(table: Table, config: ModelConfig, ours: str, theirs: str) -> None:
    """A Llama-line layer's attention and MLP: q, k, v fused into our `qkv` (fewer k and v rows
    with GQA), Qwen3's per-head q_norm and k_norm, and our `up` = [gate_proj | up_proj]."""
    kv_rows = (config.n_kv_heads or config.n_heads) * config.head_dim
    sizes = (config.d_model, kv_rows, kv_rows)
    attention, mlp, bias = f"{theirs}.self_attn", f"{theirs}.mlp", config.bias
    qkv = [f"{attention}.{name}_proj" for name in ("q", "k", "v")]
    _stacked(table, f"{ours}.attn.qkv", qkv, bias=bias, sizes=sizes)
    _stacked(table, f"{ours}.attn.out", [f"{attention}.o_proj"], bias=bias)
    if config.qk_norm != "none":
        for name in ("q_norm", "k_norm"):
            table.link(f"{ours}.attn.{name}.weight", f"{attention}.{name}.weight")
    _stacked(table, f"{ours}.ffn.up", [f"{mlp}.gate_proj", f"{mlp}.up_proj"], bias=bias)
    _stacked(table, f"{ours}.ffn.down", [f"{mlp}.down_proj"], bias=bias)


def llama_table(config: ModelConfig) -> Table:
    """LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM: RMSNorm (no bias), rotary
    (half-split, as xfmr's), gated FFN; `attention_bias` and `mlp_bias` follow `config.bias`
    (Mistral and Qwen3 have none); Qwen3's q_norm and k_norm."""
    table = Table()
    table.link("backbone.tok_emb.weight", "model.embed_tokens.weight")
    table.link("backbone.final_norm.weight", "model.norm.weight")
    table.link("lm_head.weight", "lm_head.weight")
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"model.layers.{i}"
        table.link(f"{ours}.attn_norm.weight", f"{theirs}.input_layernorm.weight")
        table.link(f"{ours}.ffn_norm.weight", f"{theirs}.post_attention_layernorm.weight")
        _llama_layer(table, config, ours, theirs)
    return table


def gemma2_table(config: ModelConfig) -> Table:
    """Gemma2ForCausalLM: Llama's attention and MLP without biases, four norms a layer (the
    sandwich's) and the final one, each RMSNorm multiplying by 1 + weight (HF = ours - 1)."""
    gain = -1.0
    table = Table()
    table.link("backbone.tok_emb.weight", "model.embed_tokens.weight")
    table.link("backbone.final_norm.weight", "model.norm.weight", shift=gain)
    table.link("lm_head.weight", "lm_head.weight")
    norms = {
        "attn_norm": "input_layernorm",
        "attn_post_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "ffn_post_norm": "post_feedforward_layernorm",
    }
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"model.layers.{i}"
        for our_norm, their_norm in norms.items():
            table.link(f"{ours}.{our_norm}.weight", f"{theirs}.{their_norm}.weight", shift=gain)
        _llama_layer(table, config, ours, theirs)
    return table


# BERT's heads: the xfmr head module -> the HF prefix, per task class.
BERT_HEADS = ("pretraining", "masked_lm", "next_sentence", "classification", "tagging", "qa")
# Which BERT heads put BERT's pooler (`bert.pooler`) on the encoder.
_POOLED = ("pretraining", "next_sentence", "classification")


def bert_table(config: ModelConfig, head: str = "pretraining") -> Table:
    """BertFor<head>: the encoder under `bert.`, then the head. BERT's Linear layers and
    LayerNorms always have biases (zeros for a model built without); a model without segment
    embeddings writes one all-zero segment."""
    bias = config.bias
    table = Table()
    embeddings = "bert.embeddings"
    table.link("backbone.tok_emb.weight", f"{embeddings}.word_embeddings.weight")
    if config.type_vocab_size:
        table.link("backbone.type_emb.weight", f"{embeddings}.token_type_embeddings.weight")
    else:
        table.zeros.append(f"{embeddings}.token_type_embeddings.weight")
    table.link("backbone.pos.embedding.weight", f"{embeddings}.position_embeddings.weight")
    table.weight_and_bias("backbone.embed_norm", f"{embeddings}.LayerNorm", bias=bias)
    for i in range(config.n_layers):
        ours, theirs = f"backbone.blocks.{i}", f"bert.encoder.layer.{i}"
        attention = f"{theirs}.attention"
        table.fused(
            f"{ours}.attn.qkv",
            [f"{attention}.self.{name}" for name in ("query", "key", "value")],
            bias=bias,
        )
        table.weight_and_bias(f"{ours}.attn.out", f"{attention}.output.dense", bias=bias)
        # Post-LN: the LayerNorm after attention is our attn_norm, the one after the FFN ffn_norm.
        table.weight_and_bias(f"{ours}.attn_norm", f"{attention}.output.LayerNorm", bias=bias)
        table.weight_and_bias(f"{ours}.ffn.up", f"{theirs}.intermediate.dense", bias=bias)
        table.weight_and_bias(f"{ours}.ffn.down", f"{theirs}.output.dense", bias=bias)
        table.weight_and_bias(f"{ours}.ffn_norm", f"{theirs}.output.LayerNorm", bias=bias)
    if head in _POOLED:
        table.weight_and_bias("pooler.dense", "bert.pooler.dense", bias=bias)
    _bert_head(table, head, bias=bias)
    return table


def _bert_head(table: Table, head: str, *, bias: bool) -> None:
    if head in ("pretraining", "masked_lm"):
        predictions = "cls.predictions"
        table.weight_and_bias("mlm.dense", f"{predictions}.transform.dense", bias=bias)
        table.weight_and_bias("mlm.norm", f"{predictions}.transform.LayerNorm", bias=bias)
        table.link("mlm.decoder.weight", f"{predictions}.decoder.weight")
        table.link("mlm.bias", f"{predictions}.bias")
        table.aliases[f"{predictions}.decoder.bias"] = f"{predictions}.bias"
    if head in ("pretraining", "next_sentence"):
        table.weight_and_bias("nsp.proj", "cls.seq_relationship")
    if head == "classification":
        table.weight_and_bias("classifier.proj", "classifier")
    if head == "tagging":
        table.weight_and_bias("classifier", "classifier")
    if head == "qa":
        table.weight_and_bias("span_head", "qa_outputs")


def _t5_self_attention(table: Table, ours: str, theirs: str) -> None:
    """T5LayerSelfAttention `theirs` -> the attention half of our Block `ours`."""
    table.link(f"{ours}.attn_norm.weight", f"{theirs}.layer_norm.weight")
    table.link(
        f"{ours}.attn.qkv.weight",
        *(f"{theirs}.SelfAttention.{name}.weight" for name in ("q", "k", "v")),
    )
    table.link(f"{ours}.attn.out.weight", f"{theirs}.SelfAttention.o.weight")


def _t5_cross_attention(table: Table, ours: str, theirs: str) -> None:
    """T5LayerCrossAttention `theirs` -> our Block's cross-attention (fused [k | v])."""
    attention = f"{theirs}.EncDecAttention"
    table.link(f"{ours}.cross_norm.weight", f"{theirs}.layer_norm.weight")
    table.link(f"{ours}.cross_attn.q.weight", f"{attention}.q.weight")
    table.link(f"{ours}.cross_attn.kv.weight", f"{attention}.k.weight", f"{attention}.v.weight")
    table.link(f"{ours}.cross_attn.out.weight", f"{attention}.o.weight")


def _t5_feed_forward(table: Table, ours: str, theirs: str, *, gated: bool) -> None:
    """T5LayerFF `theirs` -> our Block's FFN. Gated: `up` is [wi_0 (gate) | wi_1 (value)]."""
    dense = f"{theirs}.DenseReluDense"
    table.link(f"{ours}.ffn_norm.weight", f"{theirs}.layer_norm.weight")
    up = (f"{dense}.wi_0.weight", f"{dense}.wi_1.weight") if gated else (f"{dense}.wi.weight",)
    table.link(f"{ours}.ffn.up.weight", *up)
    table.link(f"{ours}.ffn.down.weight", f"{dense}.wo.weight")


def t5_table(config: ModelConfig) -> Table:
    # Layer 0 of each stack owns the relative bias and every layer of that stack reuses it; our
    # stacks own theirs directly. Cross-attention has none.
    bias = "block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    table = Table()
    for stack in ("encoder", "decoder"):
        table.link(f"{stack}.tok_emb.weight", f"{stack}.embed_tokens.weight")
        table.link(f"{stack}.pos.embedding.weight", f"{stack}.{bias}")
        table.link(f"{stack}.final_norm.weight", f"{stack}.final_layer_norm.weight")
    table.link("lm_head.weight", "lm_head.weight")
    table.aliases["shared.weight"] = "encoder.embed_tokens.weight"
    gated = ACTIVATIONS[config.activation].gated
    for i in range(config.n_layers):
        ours, theirs = f"encoder.blocks.{i}", f"encoder.block.{i}.layer"
        _t5_self_attention(table, ours, f"{theirs}.0")
        _t5_feed_forward(table, ours, f"{theirs}.1", gated=gated)
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.blocks.{i}", f"decoder.block.{i}.layer"
        _t5_self_attention(table, ours, f"{theirs}.0")
        _t5_cross_attention(table, ours, f"{theirs}.1")
        _t5_feed_forward(table, ours, f"{theirs}.2", gated=gated)
    return table


def copy_weights(model: nn.Module, table: Table, hf_model: nn.Module) -> None:
    """Map `hf_model`'s state dict with `table` (a family's) and copy it into `model`, refusing
    leftovers on either side, shape mismatches, and a tie in `model` the checkpoint lacks."""
    source = Source(hf_model.state_dict())
    weights = read_table(table, source)
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
