"""The non-finite guard's record on its own: verdicts written on the device, read back only when
settled, and the gradient norms it shares with clipping. tests/training/test_nonfinite.py
trains."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from xfmr.errors import RunFailed
from xfmr.training.guards import NonFiniteGuard, gradient_norms, skipped_where, takes_found_inf


def _model_with_grads(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model(torch.randn(5, 4)).pow(2).sum().backward()
    return model


def _verdict(guard: NonFiniteGuard, step: int, loss: float, model: nn.Module) -> float:
    norms = gradient_norms(list(model.named_parameters()))
    return float(guard.verdict(step, torch.tensor(loss), norms))


def test_good_steps_leave_nothing_to_settle() -> None:
    guard = NonFiniteGuard(max_skips=0)
    model = _model_with_grads()
    assert [_verdict(guard, step, 2.0 - step / 10, model) for step in range(5)] == [0.0] * 5
    assert guard.settle() == [] and guard.skipped == []


def test_bad_steps_are_read_when_settled_and_the_one_past_max_skips_stops(caplog) -> None:
    guard = NonFiniteGuard(max_skips=1)
    model = _model_with_grads()
    assert _verdict(guard, 0, 2.5, model) == 0.0
    assert _verdict(guard, 1, math.nan, model) == 1.0
    assert _verdict(guard, 2, 2.25, model) == 0.0
    assert guard.settle() == [1]  # read here, not at step 1
    assert "step 1 skipped, no update: the loss is nan at step 1" in caplog.text
    assert guard.settle() == []  # each bad step is read once
    model[2].weight.grad[0, 0] = math.inf
    assert _verdict(guard, 3, 2.0, model) == 1.0
    with pytest.raises(RunFailed) as stopped:
        guard.settle()
    message = str(stopped.value)
    assert "the gradient of 2.weight is inf at step 3, where the loss is 2" in message
    assert "the last finite loss was 2.25 at step 2" in message
    assert "skipped before: steps [1] (nonfinite.max_skips=1)" in message


def test_a_window_longer_than_its_slots_grows_and_stops_at_the_first_past_max_skips() -> None:
    guard = NonFiniteGuard(max_skips=2)
    model = _model_with_grads()
    for step in range(100):  # 64 slots at first
        assert _verdict(guard, step, 2.0, model) == 0.0
    for step in range(100, 110):  # every one bad, none read until the end
        assert _verdict(guard, step, math.inf, model) == 1.0
    with pytest.raises(RunFailed) as stopped:
        guard.settle()
    assert "the loss is inf at step 102" in str(stopped.value)
    assert "the last finite loss was 2 at step 99" in str(stopped.value)
    assert guard.skipped == [100, 101]


def test_clipping_by_the_guard_s_norms_is_clip_grad_norm_bit_for_bit() -> None:
    ours, theirs = _model_with_grads(seed=1), _model_with_grads(seed=1)
    for param in ours.parameters():
        param.grad.mul_(10.0)  # well past the clipping norm
    for param in theirs.parameters():
        param.grad.mul_(10.0)
    norms = gradient_norms(list(ours.named_parameters()))
    torch.nn.utils.clip_grads_with_norm_(norms.params, 1.0, norms.total)
    torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_a_fused_optimizer_leaves_a_flagged_step_out_whole() -> None:
    model = _model_with_grads()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1, fused=True)
    assert takes_found_inf(optimizer)
    assert not takes_found_inf(torch.optim.AdamW(model.parameters(), lr=0.1, foreach=True))
    optimizer.step()
    weights = [p.detach().clone() for p in model.parameters()]
    state = {k: v.clone() for k, v in optimizer.state[model[0].weight].items()}
    with skipped_where(optimizer, torch.ones(())):
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert all(torch.equal(v, optimizer.state[model[0].weight][k]) for k, v in state.items())
    assert not hasattr(optimizer, "found_inf")  # handed over for that step only
    with skipped_where(optimizer, torch.zeros(())):
        optimizer.step()
    assert not torch.equal(weights[0], model[0].weight)
