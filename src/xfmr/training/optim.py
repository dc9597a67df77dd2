"""Optimizer parameter groups and learning-rate schedules."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from xfmr.ranges import warmup_length
from xfmr.training.muon import MuonWithAdamW, muon_param_groups
from xfmr.training.mup_groups import mup_param_groups


def optimizer_groups(
    model: nn.Module, optimizer: Callable[..., Any], *, backbone_lr_scale: float = 1.0
) -> list[dict]:
    """The parameter groups for `optimizer`, the config's class with its settings (a partial):
    optim=muon's split (`xfmr.training.muon`), µP's lrs under model.parametrization=mup
    (`xfmr.training.mup_groups`), else `param_groups` with the optimizer's weight decay.
    `backbone_lr_scale`: the backbone's share of the lr (fine-tuning)."""
    settings = getattr(optimizer, "keywords", {})
    if getattr(getattr(model, "config", None), "parametrization", "sp") == "mup":
        return mup_param_groups(model, optimizer, backbone_lr_scale=backbone_lr_scale)
    if getattr(optimizer, "func", optimizer) is MuonWithAdamW:
        return muon_param_groups(model, backbone_lr_scale=backbone_lr_scale)
    lr = settings.get("lr")
    scaled = backbone_lr_scale != 1.0 and lr is not None
    return param_groups(
        model,
        weight_decay=float(settings.get("weight_decay", 0.0)),
        backbone_lr=float(lr) * backbone_lr_scale if scaled else None,
    )


def param_groups(
    model: nn.Module, weight_decay: float, *, backbone_lr: float | None = None
) -> list[dict]:
    """Weight decay on matrices and embeddings only; never on biases or norm gains (GPT-2, nanoGPT).

    With `backbone_lr`, the parameters under `model.backbone` get their own groups at that lr
    (fine-tuning a pretrained backbone more gently than a new head).
    """
    backbone = getattr(model, "backbone", None) if backbone_lr is not None else None
    in_backbone = {id(p) for p in backbone.parameters()} if backbone is not None else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {
        (True, False): [],
        (False, False): [],
        (True, True): [],
        (False, True): [],
    }
    seen: set[int] = set()
    for param in model.parameters():
        if not param.requires_grad or id(param) in seen:  # tied weights appear once
            continue
        seen.add(id(param))
        groups[(param.dim() >= 2, id(param) in in_backbone)].append(param)
    result = [
        {"params": groups[(True, False)], "weight_decay": weight_decay},
        {"params": groups[(False, False)], "weight_decay": 0.0},
    ]
    for decay in (True, False):
        if groups[(decay, True)]:
            result.append(
                {
                    "params": groups[(decay, True)],
                    "weight_decay": weight_decay if decay else 0.0,
                    "lr": backbone_lr,
                }
            )
    return result


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    warmup_steps: int | None = 100,
    warmup_ratio: float | None = None,
    min_lr_ratio: float = 0.1,
    decay_steps: int | None = None,
) -> LambdaLR:
    """Linear warm-up to the base lr, then cosine decay to `min_lr_ratio * lr` at `decay_steps`
    (default: the run's total steps), flat after; nanoGPT's `get_lr` exactly. Every schedule
    here warms up for `warmup_steps`, or when that is None `warmup_ratio` of `total_steps`."""
    warmup = warmup_length(warmup_steps, warmup_ratio, total_steps)
    decay_steps = decay_steps or total_steps
    return LambdaLR(optimizer, _warmup_cosine_factor(warmup, decay_steps, min_lr_ratio))


def _warmup_cosine_factor(
    warmup_steps: int, decay_steps: int, min_lr_ratio: float
) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if step > decay_steps:
            return min_lr_ratio
        progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
        return min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_lr_ratio)

    return factor


def constant(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    warmup_steps: int | None = 0,
    warmup_ratio: float | None = None,
) -> LambdaLR:
    """Linear warm-up, then the base lr."""
    warmup = warmup_length(warmup_steps, warmup_ratio, total_steps)
    return LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / (warmup + 1)))


def noam(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    d_model: int,
    warmup_steps: int | None = 4000,
    warmup_ratio: float | None = None,
) -> LambdaLR:
    """lr = lr0 * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1
    (Vaswani et al. 2017, eq. 3); lr0 is the optimizer's lr (the paper's is 1)."""
    warmup = warmup_length(warmup_steps, warmup_ratio, total_steps)

    def factor(step: int) -> float:
        step += 1
        return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return LambdaLR(optimizer, factor)


def inverse_sqrt(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    warmup_steps: int | None = 4000,
    warmup_ratio: float | None = None,
) -> LambdaLR:
    """Linear warm-up to the base lr, then lr * sqrt(warmup / step) (fairseq's inverse_sqrt)."""
    warmup = warmup_length(warmup_steps, warmup_ratio, total_steps)

    def factor(step: int) -> float:
        step += 1
        return step / warmup if step < warmup else (warmup / step) ** 0.5

    return LambdaLR(optimizer, factor)


def linear(
    optimizer: torch.optim.Optimizer,
    *,
    total_steps: int,
    warmup_steps: int | None = 0,
    warmup_ratio: float | None = None,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warm-up, then linear decay to `min_lr_ratio * lr` at the last step (BERT)."""
    warmup = warmup_length(warmup_steps, warmup_ratio, total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 1.0 - progress * (1.0 - min_lr_ratio)

    return LambdaLR(optimizer, factor)
