"""model.activation_checkpointing: each block's activations recomputed in backward instead of kept.
The same loss and the same gradients as without it, less kept for backward, and nothing that
changes the weights: export, init_from and a resume take it as they take the model without."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from xfmr.interop.hf_families import FAMILIES
from xfmr.nn.config import ModelConfig
from xfmr.nn.model_keys import differences, resume_keys
from xfmr.objectives import CausalLMObjective, Seq2SeqObjective

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPES = {
    "decoder": dict(arch="decoder", n_layers=3),
    "encoder_decoder": dict(arch="encoder_decoder", n_layers=2, n_decoder_layers=2),
}


def _model(arch: str, checkpointing: bool) -> tuple[nn.Module, CausalLMObjective]:
    config = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_heads=4,
        dropout=0.0,
        activation_checkpointing=checkpointing,
        **SHAPES[arch],
    )
    objective = CausalLMObjective() if arch == "decoder" else Seq2SeqObjective()
    torch.manual_seed(0)
    return objective.build_model(config), objective


def _batch(arch: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 40, (2, 12), generator=generator)
    if arch == "decoder":
        return {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    target = torch.randint(3, 40, (2, 9), generator=generator)
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "decoder_input_ids": target[:, :-1],
        "decoder_attention_mask": torch.ones_like(target[:, :-1]),
        "labels": target[:, 1:],
    }


def saved_activation_bytes(
    model: nn.Module, objective: CausalLMObjective, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, int]:
    """(loss, bytes of the tensors autograd keeps for backward other than the parameters, each
    storage counted once), as the objective computes the loss of `batch`."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = sum(objective.forward(model, batch)[0].values())  # the terms' sums
    return loss, sum(seen.values())


@pytest.mark.parametrize("arch", SHAPES)
def test_the_same_loss_and_gradients_with_less_kept_for_backward(arch: str) -> None:
    measured = {}
    for checkpointing in (False, True):
        model, objective = _model(arch, checkpointing)
        batch = _batch(arch)
        loss, kept = saved_activation_bytes(model, objective, batch)
        loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        measured[checkpointing] = (loss.detach(), grads, kept)
    (loss_off, grads_off, kept_off), (loss_on, grads_on, kept_on) = measured[False], measured[True]
    assert torch.equal(loss_on, loss_off)
    assert grads_on.keys() == grads_off.keys()
    for name in grads_off:
        torch.testing.assert_close(grads_on[name], grads_off[name], rtol=0, atol=1e-6, msg=name)
    assert kept_on < 0.6 * kept_off, (kept_on, kept_off)


def test_dropout_draws_the_same_masks_when_a_block_runs_again() -> None:
    """Recomputation restores the random state, so a block with dropout recomputes what the
    forward drew (torch.utils.checkpoint's preserve_rng_state)."""
    results = []
    for checkpointing in (False, True):
        model, objective = _model("decoder", checkpointing)
        model.train()
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.3
        torch.manual_seed(5)
        loss = objective.forward(model, _batch("decoder"))[0]["tokens"]
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(results[0][0], results[1][0])
    for off, on in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(on, off, rtol=0, atol=1e-6)


def test_only_a_forward_that_saves_for_backward_recomputes(monkeypatch) -> None:
    """Under no_grad (evaluation, generation with a KV cache) there is no backward to save for."""
    import xfmr.nn.stack

    calls = []
    checkpoint = xfmr.nn.stack.checkpoint
    monkeypatch.setattr(
        xfmr.nn.stack, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k)
    )
    model, _ = _model("decoder", True)
    ids = _batch("decoder")["input_ids"]
    with torch.no_grad():
        model(ids)
    assert not calls
    model(ids)
    assert len(calls) == 3  # one a block


def test_it_changes_no_weight_so_export_init_from_and_resume_take_it() -> None:
    on = ModelConfig(vocab_size=40, activation_checkpointing=True)
    off = ModelConfig(vocab_size=40)
    assert differences(on, off, ignore=resume_keys()) == []
    assert not FAMILIES["GPT2LMHeadModel"].differences(on), "export refuses it"
    from xfmr.interop.hf_configs import gpt2_hf_config

    assert gpt2_hf_config(on) == gpt2_hf_config(off)
    plain, checkpointed = _model("decoder", False)[0], _model("decoder", True)[0]
    assert plain.state_dict().keys() == checkpointed.state_dict().keys()
