"""optim=muon (`xfmr.training.muon`): which parameters Muon takes and which AdamW; one Muon step
against a Newton-Schulz iteration written out here; the schedule on both learning rates;
accumulation; an exact resume; and the settings it refuses in one line."""

from __future__ import annotations

import functools
import io
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from helpers.config import compose_config
from helpers.resume import assert_same_weights_and_optimizer_state, went_on_and_resumed
from xfmr.config.optim import MUON, OptimConfig
from xfmr.data.order import COUNTS, counted_windows
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.layers import Block
from xfmr.nn.models import CausalLM
from xfmr.objectives.clm import CausalLMObjective
from xfmr.targets import locate
from xfmr.training.module import XfmrModule
from xfmr.training.muon import MuonWithAdamW, hidden_matrices
from xfmr.training.optim import optimizer_groups, warmup_cosine

pytestmark = pytest.mark.usefixtures("one_thread")

# Jordan et al. 2024's quintic Newton-Schulz coefficients.
NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315


def _config(**given) -> ModelConfig:
    settings = dict(vocab_size=40, n_layers=2, n_heads=2, d_model=16, bias=True, dropout=0.0)
    return ModelConfig(**{**settings, **given}, pos=PosConfig(name="learned", max_positions=16))


def _causal_lm(tie: bool = True) -> CausalLM:
    torch.manual_seed(0)
    return CausalLM(_config(tie_embeddings=tie))


def _muon(**settings) -> functools.partial:
    return functools.partial(MuonWithAdamW, **settings)


def _roles(model: nn.Module) -> dict[str, set[str]]:
    """Each parameter's name under the optimizer that `optimizer_groups` gives it."""
    names = {id(p): n for n, p in model.named_parameters()}
    roles: dict[str, set[str]] = {"muon": set(), "adamw": set(), "adamw_no_decay": set()}
    for group in optimizer_groups(model, _muon()):
        role = "muon" if group["muon"] else "adamw" if group["decay"] else "adamw_no_decay"
        roles[role] |= {names[id(p)] for p in group["params"]}
    return roles


@pytest.mark.parametrize("tie", [True, False])
def test_muon_takes_the_blocks_matrices_and_adamw_the_rest(tie: bool) -> None:
    model = _causal_lm(tie)
    roles = _roles(model)
    projections = ("attn.qkv", "attn.out", "ffn.up", "ffn.down")
    assert roles["muon"] == {f"backbone.blocks.{i}.{p}.weight" for i in (0, 1) for p in projections}
    embeddings = {"backbone.tok_emb.weight", "backbone.pos.embedding.weight"}
    # A tied head is the embedding, one parameter; an untied one is an output layer: AdamW.
    assert roles["adamw"] == (embeddings if tie else embeddings | {"lm_head.weight"})
    assert all(n.endswith(("norm.weight", "norm.bias", ".bias")) for n in roles["adamw_no_decay"])
    # Every parameter in exactly one group.
    named = dict(model.named_parameters())
    assert sum(len(r) for r in roles.values()) == len(named)
    assert set().union(*roles.values()) == set(named)


def test_cross_attention_is_muon_s_and_a_task_head_adamw_s() -> None:
    torch.manual_seed(0)
    model = EncoderDecoder(_config(arch="encoder_decoder", n_layers=1))
    roles = _roles(model)
    cross = {f"decoder.blocks.0.cross_attn.{p}.weight" for p in ("q", "kv", "out")}
    assert cross <= roles["muon"]
    linears_in_blocks = {
        id(m.weight)
        for block in model.modules()
        if isinstance(block, Block)
        for m in block.modules()
        if isinstance(m, nn.Linear)
    }
    assert {id(p) for p in hidden_matrices(model)} == linears_in_blocks
    assert not any("emb" in n or "lm_head" in n for n in roles["muon"])


def _newton_schulz(G: torch.Tensor, steps: int) -> torch.Tensor:
    """Jordan et al. 2024's quintic iteration: X = G / (|G|_F + eps), then
    X <- a X + (b A + c A A) X with A = X X^T, on the wide way of G. As torch.optim.Muon runs it
    in bfloat16, each product's result is rounded to bfloat16 (`bf`)."""

    def bf(x: torch.Tensor) -> torch.Tensor:
        return x.bfloat16().float()

    X = bf(G)
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = bf(X / (bf(X.norm()) + 1e-7))
    for _ in range(steps):
        A = bf(X @ X.T)
        B = bf(NS_B * A + NS_C * (A @ A))
        X = bf(NS_A * X + B @ X)
    return X.T if tall else X


@pytest.mark.parametrize(
    ("shape", "adjust_lr_fn", "adjusted"),
    [
        ((6, 4), "match_rms_adamw", lambda rows, cols: 0.2 * math.sqrt(max(rows, cols))),
        ((3, 5), "original", lambda rows, cols: math.sqrt(max(1, rows / cols))),
    ],
)
def test_muon_steps_as_the_hand_written_newton_schulz(shape, adjust_lr_fn, adjusted) -> None:
    torch.manual_seed(0)
    start, gradients = torch.randn(shape), [torch.randn(shape), torch.randn(shape)]
    lr, decay, momentum, steps = 0.02, 0.1, 0.95, 5
    weight = nn.Parameter(start.clone())
    optimizer = MuonWithAdamW(
        [{"params": [weight], "muon": True}],
        lr=lr,
        weight_decay=decay,
        momentum=momentum,
        ns_steps=steps,
        adjust_lr_fn=adjust_lr_fn,
    )
    expected, buffer = start.clone(), torch.zeros(shape)
    for gradient in gradients:
        weight.grad = gradient.clone()
        optimizer.step()
        buffer = momentum * buffer + (1 - momentum) * gradient  # an average (torch's lerp)
        nesterov = gradient + momentum * (buffer - gradient)
        update = _newton_schulz(nesterov, steps)
        expected = expected * (1 - lr * decay) - lr * adjusted(*shape) * update
        torch.testing.assert_close(weight.detach(), expected, rtol=0, atol=1e-5)
    # The iteration roughly orthogonalises: the update's singular values lie near 1.
    assert torch.linalg.svdvals(update).sub(1).abs().max() < 0.5


def test_adamw_groups_step_as_torch_s_adamw_at_their_own_lr() -> None:
    torch.manual_seed(0)
    ours, theirs = nn.Parameter(torch.randn(5)), nn.Parameter(torch.randn(5))
    theirs.data.copy_(ours.data)
    optimizer = MuonWithAdamW(
        [{"params": [ours], "muon": False}], lr=0.5, adamw_lr=0.01, betas=(0.8, 0.9)
    )
    reference = torch.optim.AdamW([theirs], lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)
    for _ in range(3):
        gradient = torch.randn(5)
        ours.grad, theirs.grad = gradient.clone(), gradient.clone()
        optimizer.step()
        reference.step()
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=0, atol=0)


def test_the_schedule_scales_both_learning_rates() -> None:
    model = _causal_lm()
    optimizer = _muon(lr=0.02, adamw_lr=3e-3)(optimizer_groups(model, _muon()))
    schedule = warmup_cosine(optimizer, total_steps=10, warmup_steps=3, min_lr_ratio=0.1)
    for _ in range(10):
        factor = schedule.lr_lambdas[0](schedule.last_epoch)
        for group in optimizer.param_groups:
            base = 0.02 if group["muon"] else 3e-3
            assert group["lr"] == pytest.approx(base * factor)
        optimizer.step()
        schedule.step()


def test_a_backbone_lr_scale_scales_muon_s_and_adamw_s() -> None:
    model = _causal_lm(tie=False)
    groups = optimizer_groups(model, _muon(), backbone_lr_scale=0.1)
    optimizer = _muon(lr=0.02, adamw_lr=3e-3)(groups)
    backbone = {id(p) for p in model.backbone.parameters()}
    for group in optimizer.param_groups:
        base = 0.02 if group["muon"] else 3e-3
        inside = {id(p) in backbone for p in group["params"]}
        assert len(inside) == 1  # a group is all backbone or all head
        assert group["lr"] == pytest.approx(base * (0.1 if inside.pop() else 1.0))


class _Strategy:
    def backward(self, loss: torch.Tensor, optimizer) -> None:
        loss.backward()


def _module() -> XfmrModule:
    """The training module, its optimizer optim=muon's, stepping through its own training
    step (`_optimizer_step`) with the trainer replaced by what that step reads."""
    module = XfmrModule(
        model=_causal_lm(),
        model_config={},
        objective=CausalLMObjective(pad_id=0),
        optimizer=_muon(lr=1e-3, adamw_lr=1e-3, fused=True),
    )
    module.trainer = SimpleNamespace(
        world_size=1, strategy=_Strategy(), precision_plugin=None, lr_scheduler_configs=[]
    )
    optimizer = module.configure_optimizers()
    module.optimizers = lambda: optimizer  # type: ignore[method-assign]
    return module.train()


def test_accumulating_two_micro_batches_takes_the_one_batch_step() -> None:
    torch.manual_seed(1)
    ids = torch.randint(1, 40, (4, 13))
    ids[1, 9:] = ids[3, 5:] = 0  # padding: the micro-batches count unequal targets
    objective = CausalLMObjective(pad_id=0)
    batch = objective.collate(list(ids))
    halves = [{k: v[rows] for k, v in batch.items()} for rows in (slice(0, 2), slice(2, 4))]
    models = []
    for micro_batches, k in (([batch], 1), (halves, 2)):
        module = _module()
        counted = [{**b, COUNTS: objective.counts(b)} for b in micro_batches]
        for index, window in enumerate(counted_windows(iter(counted), position=0, size=k)):
            module.training_step(window, index)
        models.append(module.model)
    whole, accumulated = (dict(m.named_parameters()) for m in models)
    initial = dict(_causal_lm().named_parameters())
    assert all(not torch.equal(p, initial[n]) for n, p in whole.items())  # every one stepped
    for name, param in whole.items():
        torch.testing.assert_close(accumulated[name], param, rtol=0, atol=1e-5, msg=name)


def _trained(model: CausalLM, steps: int, state: bytes | None = None) -> tuple[CausalLM, bytes]:
    """`steps` optimizer steps of `model` under optim=muon and warmup_cosine, from the optimizer
    and schedule state in `state` (as a checkpoint holds them); the state after."""
    optimizer = _muon(lr=0.02, adamw_lr=3e-3, fused=True)(optimizer_groups(model, _muon()))
    schedule = warmup_cosine(optimizer, total_steps=6, warmup_steps=2)
    if state is not None:
        saved = torch.load(io.BytesIO(state), weights_only=True)
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
    for _ in range(steps):
        torch.manual_seed(schedule.last_epoch)  # each step's batch, by its number
        model(torch.randint(0, 40, (2, 12))).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
    written = io.BytesIO()
    torch.save({"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}, written)
    return model, written.getvalue()


def test_a_resumed_optimizer_continues_exactly() -> None:
    straight, straight_state = _trained(_causal_lm(), 6)
    stopped, state = _trained(_causal_lm(), 3)
    resumed = _causal_lm()
    resumed.load_state_dict(stopped.state_dict())
    resumed, resumed_state = _trained(resumed, 3, state)
    for name, param in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], param), name
    ours = torch.load(io.BytesIO(resumed_state), weights_only=True)["optimizer"]["state"]
    theirs = torch.load(io.BytesIO(straight_state), weights_only=True)["optimizer"]["state"]
    assert any("momentum_buffer" in s for s in theirs.values())  # Muon's state is there
    assert any("exp_avg" in s for s in theirs.values())  # and AdamW's
    for index, values in theirs.items():
        for key, value in values.items():
            assert torch.equal(ours[index][key], value), (index, key)


def test_a_run_resumed_from_its_checkpoint_ends_as_the_run_that_went_on(tmp_path: Path) -> None:
    """The real run, in process: four steps with a checkpoint at step 2, and a run resumed
    from that checkpoint, end with the same weights and optimizer state."""
    ours, theirs, _ = went_on_and_resumed(tmp_path, ["optim=muon", "size=tiny"])
    assert ours["global_step"] == theirs["global_step"] == 4
    assert theirs["optimizer_states"][0]["param_groups"][0]["muon"]
    assert_same_weights_and_optimizer_state(ours, theirs)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["arch=rnn"], "use optim=muon with arch in [decoder, encoder, encoder_decoder]"),
        (
            ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=1"],
            "use optim=muon with trainer in [default, cpu, ddp]",
        ),
    ],
)
def test_where_muon_cannot_apply_it_is_refused_in_one_line(tmp_path, overrides, refusal) -> None:
    with pytest.raises(UserError) as refused:
        compose_config(tmp_path, ["optim=muon", "size=tiny", *overrides])
    assert refusal in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("adjust_lr_fn", "nope"), ("momentum", 1.0), ("ns_steps", 0), ("betas", [0.9, 1.0])],
)
def test_a_bad_value_is_refused_naming_its_key(key: str, value) -> None:
    values = {"_target_": MUON, "_partial_": True, key: value}
    with pytest.raises(UserError, match=rf"^optim\.{key}="):
        OptimConfig.read(values)


def test_the_config_names_the_optimizer_class() -> None:
    assert locate(MUON) is MuonWithAdamW
    assert OptimConfig.read({"_target_": MUON, "_partial_": True}).is_muon
