"""Optimizer parameter groups and the warm-up + cosine schedule (nanoGPT's get_lr)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import CausalLM
from xfmr.training.optim import param_groups, warmup_cosine


def _model(tie: bool = True) -> CausalLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=40,
        n_layers=2,
        n_heads=2,
        d_model=16,
        bias=True,
        tie_embeddings=tie,
        pos=PosConfig(name="learned", max_positions=8),
    )
    return CausalLM(config)


def _expected_split(model: nn.Module) -> tuple[set[int], set[int]]:
    """By role, not by shape: Linear/Embedding weights decay; biases and norm gains do not."""
    decay, no_decay = set(), set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if isinstance(module, nn.LayerNorm) or name == "bias":
                no_decay.add(id(param))
            else:
                decay.add(id(param))
    return decay, no_decay


@pytest.mark.parametrize("tie", [True, False])
def test_param_groups_split_by_role(tie: bool) -> None:
    """Decay holds exactly the weight matrices/embeddings; no-decay the biases and norm weights."""
    model = _model(tie)
    decay_group, no_decay_group = param_groups(model, weight_decay=0.1)
    assert decay_group["weight_decay"] == 0.1 and no_decay_group["weight_decay"] == 0.0
    expected_decay, expected_no_decay = _expected_split(model)
    assert {id(p) for p in decay_group["params"]} == expected_decay
    assert {id(p) for p in no_decay_group["params"]} == expected_no_decay
    assert all(p.dim() >= 2 for p in decay_group["params"])
    assert all(p.dim() == 1 for p in no_decay_group["params"])


def test_param_groups_count_tied_weight_once() -> None:
    """The tied embedding / LM head weight appears once, and the groups cover every parameter."""
    model = _model(tie=True)
    decay, no_decay = (g["params"] for g in param_groups(model, weight_decay=0.1))
    decay_ids = [id(p) for p in decay]
    assert len(decay_ids) == len(set(decay_ids))
    assert decay_ids.count(id(model.lm_head.weight)) == 1
    assert not {id(p) for p in decay} & {id(p) for p in no_decay}
    total = sum(p.numel() for p in decay) + sum(p.numel() for p in no_decay)
    unique = {id(p): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}
    assert total == sum(unique.values()) == model.num_parameters()


def test_param_groups_skip_frozen_parameters() -> None:
    """Parameters with requires_grad=False are in neither group."""
    model = _model()
    model.backbone.pos.embedding.weight.requires_grad_(False)
    frozen = id(model.backbone.pos.embedding.weight)
    assert all(id(p) != frozen for g in param_groups(model, weight_decay=0.1) for p in g["params"])


def _nanogpt_get_lr(it: int, *, lr: float, min_lr: float, warmup: int, decay: int) -> float:
    """nanoGPT train.py get_lr, verbatim in logic."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (lr - min_lr)


def test_warmup_cosine_matches_nanogpt_get_lr() -> None:
    """The scheduled lr at steps 0..2010 equals nanoGPT's get_lr (lr 1e-3, min 1e-4, 100/2000)."""
    lr, min_lr, warmup, decay = 1e-3, 1e-4, 100, 2000
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = warmup_cosine(
        optimizer,
        total_steps=decay,
        warmup_steps=warmup,
        min_lr_ratio=min_lr / lr,
        decay_steps=decay,
    )
    for step in range(decay + 11):
        expected = _nanogpt_get_lr(step, lr=lr, min_lr=min_lr, warmup=warmup, decay=decay)
        actual = optimizer.param_groups[0]["lr"]
        assert math.isclose(actual, expected, rel_tol=1e-9), (step, actual, expected)
        optimizer.step()
        scheduler.step()


def test_warmup_cosine_decays_over_total_steps_by_default() -> None:
    """Without decay_steps, the cosine reaches min_lr exactly at total_steps."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = warmup_cosine(optimizer, total_steps=50, warmup_steps=10, min_lr_ratio=0.1)
    lrs = []
    for _ in range(52):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert math.isclose(lrs[10], 1.0) and math.isclose(lrs[50], 0.1) and math.isclose(lrs[51], 0.1)
    assert all(a > b for a, b in zip(lrs[10:50], lrs[11:51], strict=True))


def _lrs(make, steps: int, lr: float = 1.0) -> list[float]:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_noam_is_the_papers_formula() -> None:
    """lr = d^-0.5 * min(step^-0.5, step * warmup^-1.5), step from 1 (Vaswani et al. eq. 3)."""
    from xfmr.training.optim import noam

    lrs = _lrs(lambda o: noam(o, total_steps=0, d_model=512, warmup_steps=4000), 10000, lr=2.0)
    for step in (1, 2, 100, 3999, 4000, 4001, 9999):
        expected = 2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert math.isclose(lrs[step - 1], expected, rel_tol=1e-12), step
    assert max(range(len(lrs)), key=lrs.__getitem__) == 3999, "peak at step = warmup"


def test_inverse_sqrt_and_linear_schedules() -> None:
    from xfmr.training.optim import inverse_sqrt, linear

    lrs = _lrs(lambda o: inverse_sqrt(o, total_steps=0, warmup_steps=10), 40)
    assert lrs[9] == 1.0 and math.isclose(lrs[39], math.sqrt(10 / 40))
    assert lrs[:10] == sorted(lrs[:10])
    lrs = _lrs(lambda o: linear(o, total_steps=100, warmup_steps=10, min_lr_ratio=0.0), 101)
    assert math.isclose(lrs[10], 1.0) and math.isclose(lrs[55], 0.5) and lrs[100] == 0.0
