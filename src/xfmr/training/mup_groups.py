"""µP's learning rates (`model.parametrization=mup`, `xfmr.nn.mup`): each parameter's lr and
weight decay by how many of its dimensions grow with width, as microsoft/mup's MuAdam, MuAdamW
and MuSGD set them (Yang et al. 2022, Tables 3 and 8), with m = d_model / mup_base_width:

    optimizer      hidden matrices        vectors, embeddings, readouts     the rest
    Adam, AdamW    lr / m,  decay * m     lr                                lr
    SGD            lr                     lr * m,  decay / m                lr

A group's weight decay moves against its lr, so the shrink a step makes (lr * decay) is the
same at every width: microsoft/mup's default (`decoupled_wd=False`). Any other optimizer is
refused: µP's rule for Muon's orthogonalised updates is not the one for Adam, and no rule is
guessed here.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from xfmr.nn.mup import FINITE, HIDDEN, VECTOR, width_multiplier, widths

# The optimizer families µP has a rule for -> the power of m on the lr, by `widths` kind.
MUP_LR_POWERS: dict[str, dict[int, int]] = {
    "adam": {FINITE: 0, VECTOR: 0, HIDDEN: -1},
    "sgd": {FINITE: 0, VECTOR: 1, HIDDEN: 0},
}
MUP_OPTIMIZERS: tuple[tuple[type, str], ...] = (
    (torch.optim.Adam, "adam"),
    (torch.optim.AdamW, "adam"),
    (torch.optim.SGD, "sgd"),
)


def mup_family(optimizer_class: type) -> str:
    """ "adam" or "sgd": which of µP's rules `optimizer_class` takes; ValueError naming
    model.parametrization for any other."""
    for cls, family in MUP_OPTIMIZERS:
        if isinstance(optimizer_class, type) and issubclass(optimizer_class, cls):
            return family
    known = ", ".join(f"{cls.__module__}.{cls.__name__}" for cls, _ in MUP_OPTIMIZERS)
    raise ValueError(
        f"model.parametrization=mup has learning-rate rules for {known} only, not "
        f"{getattr(optimizer_class, '__name__', optimizer_class)}: use optim=adamw, or "
        "model.parametrization=sp"
    )


def mup_param_groups(
    model: nn.Module, optimizer: Any, *, backbone_lr_scale: float = 1.0
) -> list[dict]:
    """`model`'s trainable parameters in groups, each with its µP lr and weight decay
    (`optimizer`: the config's class with its settings, a partial). Decay applies to matrices
    and embeddings only, as in `param_groups`; with `backbone_lr_scale` other than 1, the
    parameters under `model.backbone` take that share of the lr too (fine-tuning)."""
    optimizer_class = getattr(optimizer, "func", optimizer)
    powers = MUP_LR_POWERS[mup_family(optimizer_class)]
    settings = getattr(optimizer, "keywords", {})
    lr = float(settings.get("lr", inspect.signature(optimizer_class).parameters["lr"].default))
    weight_decay = float(settings.get("weight_decay", 0.0))
    m = width_multiplier(model.config)
    backbone = getattr(model, "backbone", None) if backbone_lr_scale != 1.0 else None
    in_backbone = {id(p) for p in backbone.parameters()} if backbone is not None else set()
    kinds = widths(model)
    grouped: dict[tuple[bool, bool, int], list[nn.Parameter]] = {}
    for param in model.parameters():  # a tied weight comes once
        if param.requires_grad:
            key = (param.dim() >= 2, id(param) in in_backbone, powers[kinds[id(param)]])
            grouped.setdefault(key, []).append(param)
    return [
        {
            "params": params,
            "lr": lr * (backbone_lr_scale if backbone_part else 1.0) * m**power,
            "weight_decay": weight_decay * m**-power if decay else 0.0,
        }
        for (decay, backbone_part, power), params in grouped.items()
    ]
