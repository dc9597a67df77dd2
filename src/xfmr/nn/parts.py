"""Parts of a transformer you plug in from your own configs, without editing xfmr: a positional
scheme, a self-attention, a feed-forward. Each is a class named by `_target_` in a YAML file of
your `--config-dir`, chosen like any group::

    my_configs/pos/NAME.yaml        # @package model.pos          xfmr-train pos=NAME
    my_configs/attention/NAME.yaml  # @package model.attention    xfmr-train attention=NAME
    my_configs/ffn/NAME.yaml        # @package model.ffn          xfmr-train ffn=NAME

The file's other keys are the class's own keyword arguments (overridable as `model.pos.KEY=`,
`model.attention.KEY=`, `model.ffn.KEY=`); xfmr adds each of the model's facts below that the
constructor names as a parameter (all of them to one that takes `**kwargs`). The contracts:

Built by `xfmr.nn.positions.scheme_of`, `xfmr.nn.layers.self_attention` and `feed_forward`.

- A positional scheme subclasses `xfmr.nn.positions.PositionScheme`, declares `kind` (absolute,
  bias or rotary) and implements that kind's hook: `embed(x, offset=, positions=)`,
  `attention_bias(length, offset=, key_length=)` -> (1, H, T, S), or
  `rotation(length, offset=, positions=)` -> (cos, sin). Facts: d_model, n_heads, head_dim,
  max_positions, bidirectional (False in a decoder's causal stack), sinusoid_scale, init_std.
  `name` in its YAML names it in logs and tables. It is taken to work on sequences longer than
  those trained on.
- A self-attention is an nn.Module whose forward takes what `MultiHeadAttention.forward` takes,
  `(x, *, mask, is_causal, rotation, cache)`, and returns (B, T, C); it applies `rotation`
  itself. Facts: the arguments xfmr's own attention takes (`attention_arguments`). A projection named `out` gets GPT-2's scaled initialisation.
- A feed-forward is an nn.Module mapping (B, T, C) to (B, T, C). Facts: the arguments xfmr's
  own feed-forward takes (`ffn_arguments`: d_model, d_ff, activation, dropout, bias). A projection named `down` gets the scaled initialisation.

Every part's nn.Linear and nn.Embedding are then drawn as xfmr draws its own (N(0, init_std),
zero biases); a part that wants another start defines `init_weights(self)`, called afterwards.
The config check imports the class before any training, and a part of your own is refused by
Hugging Face export.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from xfmr.nn.config import TARGET


def build_part(section: str, settings: dict[str, Any], facts: dict[str, Any]) -> Any:
    """`settings[_target_]` built with the other settings and each fact its constructor names."""
    options = {k: v for k, v in settings.items() if k != TARGET}
    cls = import_target(section, settings[TARGET])
    parameters = inspect.signature(cls).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    given = {k: v for k, v in facts.items() if takes_all or k in parameters}
    return cls(**{**given, **options})


def import_target(section: str, target: str) -> Any:
    """The class `target` ("package.module.Name") names; ValueError naming the section if none."""
    module_name, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"{section}._target_={target}: no such class ({e})") from None
