"""The maximal update parametrization, µP (Yang et al. 2022, "Tensor Programs V", Tables 3 and 8;
microsoft/mup's conventions): what `model.parametrization=mup` changes, relative to the model at
`model.mup_base_width`, where µP and the standard parametrization (sp) are the same model.

With m = d_model / mup_base_width (every hidden width, d_ff and the head dim with n_heads fixed,
scales with d_model):

- hidden matrices (every nn.Linear that is not a `Readout`: attention and feed-forward
  projections, a head's dense layer) are drawn with std init_std / sqrt(m), so their variance
  goes as 1/fan_in (`rescale_hidden`); Adam's lr on them is lr / m (`lr_multipliers`);
- the readout (`Readout`: the LM head, a task head's output layer) multiplies its input by 1/m
  (microsoft/mup's MuReadout; tied to the embedding it is their MuSharedReadout: the weight stays
  the embedding's, drawn and stepped as an input weight);
- attention scores are scaled 1/d_head: the scale at the base head dim times base_d_head / d_head
  (`attention_scale`), so at the base width it is 1/sqrt(d_head) as in sp;
- embeddings, biases and norm gains keep their init and Adam's lr.

Under sp every function here returns what the model did before µP existed: the readout's
multiplier is None and nothing is rescaled.
"""

from __future__ import annotations

import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.norms import RMSNorm

# How many of a parameter's dimensions grow with width (microsoft/mup's `infshape.ninf()`).
FINITE, VECTOR, HIDDEN = 0, 1, 2


class Readout(nn.Linear):
    """An output layer: nn.Linear with its input multiplied by `multiplier` (None: not at all,
    the plain nn.Linear). µP's output multiplier base_width / d_model lives here
    (microsoft/mup's MuReadout); the weight may be tied to an embedding."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        multiplier: float | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.multiplier = multiplier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x if self.multiplier is None else x * self.multiplier)

    def extra_repr(self) -> str:
        shown = "" if self.multiplier is None else f", multiplier={self.multiplier:.4g}"
        return super().extra_repr() + shown


def is_mup(config: ModelConfig) -> bool:
    return config.parametrization == "mup"


def width_multiplier(config: ModelConfig) -> float:
    """m = d_model / mup_base_width under µP; 1 under sp."""
    return config.d_model / config.mup_base_width if is_mup(config) else 1.0


def readout_multiplier(config: ModelConfig) -> float | None:
    """The factor on a readout's input: 1/m under µP, None (no multiply) under sp."""
    return config.mup_base_width / config.d_model if is_mup(config) else None


def attention_scale(config: ModelConfig) -> float | None:
    """The factor on q.k: sp's, None (1/sqrt(d_head), SDPA's own) or 1 (attn_scale=false,
    T5); under µP, sp's at the base head dim times base_d_head / d_head: the 1/d_head law
    (Yang et al. 2022, sec. 6), equal to sp at the base width."""
    if not is_mup(config):
        return None if config.attn_scale else 1.0
    base_head_dim = config.mup_base_width / config.n_heads
    at_base = base_head_dim**-0.5 if config.attn_scale else 1.0
    return at_base * base_head_dim / config.head_dim


def logit_scale(config: ModelConfig) -> float | None:
    """`scale_logits`' factor on an encoder-decoder's output (T5): d_model^-0.5; under µP the
    base width's, mup_base_width^-0.5, a constant (the readout carries the 1/m)."""
    if not config.scale_logits:
        return None
    return (config.mup_base_width if is_mup(config) else config.d_model) ** -0.5


def hidden_linears(model: nn.Module) -> list[nn.Linear]:
    """Every nn.Linear of `model` that is not a `Readout`: the matrices whose fan-in and
    fan-out both grow with width."""
    return [m for m in model.modules() if isinstance(m, nn.Linear) and not isinstance(m, Readout)]


@torch.no_grad()
def rescale_hidden(model: nn.Module, config: ModelConfig) -> None:
    """Hidden matrices drawn at std init_std (and GPT-2's depth scaling) become init_std /
    sqrt(m): variance base_fan_in / fan_in times sp's. Nothing under sp."""
    if not is_mup(config):
        return
    for linear in hidden_linears(model):
        linear.weight.mul_(width_multiplier(config) ** -0.5)


def widths(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> how many of its dimensions grow with width: HIDDEN for a hidden matrix,
    VECTOR for a hidden layer's bias, a norm's gain and bias, an embedding of d_model columns
    and a readout's weight, FINITE for the rest (a readout's bias, a relative-position table,
    an MLM head's output bias)."""
    found: dict[int, int] = {}
    hidden = {id(m) for m in hidden_linears(model)}
    d_model = model.config.d_model
    for module in model.modules():
        direct = list(module.parameters(recurse=False))
        if id(module) in hidden:
            found[id(module.weight)] = HIDDEN
            kind = VECTOR
        elif isinstance(module, Readout):
            found[id(module.weight)] = found.get(id(module.weight), VECTOR)
            kind = FINITE
        elif isinstance(module, nn.LayerNorm | RMSNorm):
            kind = VECTOR
        elif isinstance(module, nn.Embedding):
            kind = VECTOR if module.embedding_dim == d_model else FINITE
        else:
            kind = FINITE
        for param in direct:
            found.setdefault(id(param), kind)
    return found


def folded(model: nn.Module) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """The sp model that computes what `model` computes: its config and state dict, with µP's
    multipliers folded into the weights (Hugging Face export; `model` is left as it is).

    The readout's 1/m (and `scale_logits`' factor before an LM head) multiply the readout's
    weight, which then leaves an embedding it was tied to (tie_embeddings=false; scale_logits
    false); the attention's ratio to sp's scale multiplies the query projection's rows (and
    bias), or the query norm's gain and bias under qk_norm, which would undo it on q. Under
    sp: the model's own config and a copy of its state.
    """
    config = model.config
    state = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    if not is_mup(config):
        return config, state
    sp_scale = config.head_dim**-0.5 if config.attn_scale else 1.0
    query = attention_scale(config) / sp_scale
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, Readout) and module.multiplier is not None:
            factor = module.multiplier
            if name == "lm_head" and getattr(model, "logit_scale", None) is not None:
                factor *= model.logit_scale  # the encoder-decoder's, before its LM head
            state[f"{prefix}weight"] = state[f"{prefix}weight"] * factor
        elif getattr(module, "q_norm", None) is not None:  # the norm would undo it on q
            for part in ("weight", "bias"):
                if f"{prefix}q_norm.{part}" in state:
                    state[f"{prefix}q_norm.{part}"] = state[f"{prefix}q_norm.{part}"] * query
        elif isinstance(
            projection := getattr(module, "qkv", getattr(module, "q", None)), nn.Linear
        ):
            q_rows = projection.in_features  # q's rows: the first d_model of a fused qkv
            for part in ("weight", "bias"):
                if (key := f"{prefix}{'qkv' if hasattr(module, 'qkv') else 'q'}.{part}") in state:
                    state[key] = torch.cat([state[key][:q_rows] * query, state[key][q_rows:]])
    return folded_config(model), state


def folded_config(model: nn.Module) -> ModelConfig:
    """The config of `folded`'s sp model: parametrization=sp, no scale_logits, and
    tie_embeddings=false where a readout's weight is an embedding's."""
    config = model.config
    if not is_mup(config):
        return config
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    tied = any(isinstance(m, Readout) and id(m.weight) in embeddings for m in model.modules())
    settings = {**config.settings(), "vocab_size": config.vocab_size}
    sp = {"parametrization": "sp", "mup_base_width": None, "scale_logits": False}
    return ModelConfig.from_dict({**settings, **sp, **({"tie_embeddings": False} if tied else {})})
