"""µP's learning rates (`xfmr.training.mup_groups`) and its coordinate check
(`xfmr.training.coord_check`): each parameter group's lr and weight decay as microsoft/mup's
MuAdamW and MuSGD set them, the optimizers refused in one line, a run that records the key and
resumes exactly, and the check itself: flat under µP, growing under sp."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import yaml

from helpers.config import compose_config
from helpers.resume import assert_same_weights_and_optimizer_state, went_on_and_resumed
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import CausalLM
from xfmr.training.coord_check import coord_check, slopes
from xfmr.training.muon import MuonWithAdamW
from xfmr.training.optim import optimizer_groups

pytestmark = pytest.mark.usefixtures("one_thread")
MUP = ["size=tiny", "model.parametrization=mup", "model.mup_base_width=32"]


def _model(d_model: int = 64, **given) -> CausalLM:
    torch.manual_seed(0)
    settings = dict(vocab_size=40, n_layers=1, n_heads=2, d_model=d_model, bias=True,
                    parametrization="mup", mup_base_width=16)  # fmt: skip
    return CausalLM(ModelConfig(**{**settings, **given}, pos=PosConfig(name="learned")))


def _lrs(model: CausalLM, optimizer) -> dict[str, tuple[float, float]]:
    """Each parameter's name -> (lr, weight decay) of its group."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {
        names[id(p)]: (group.get("lr", optimizer.keywords["lr"]), group["weight_decay"])
        for group in optimizer_groups(model, optimizer)
        for p in group["params"]
    }


def test_adamw_steps_hidden_matrices_at_lr_over_m_and_the_rest_at_lr() -> None:
    """m = 64 / 16 = 4: hidden matrices lr / 4 with decay * 4 (lr * decay kept); embeddings,
    the tied readout, biases and gains at lr; no decay on vectors."""
    lrs = _lrs(_model(), functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.1))
    for name in ("attn.qkv.weight", "attn.out.weight", "ffn.up.weight", "ffn.down.weight"):
        assert lrs[f"backbone.blocks.0.{name}"] == pytest.approx((2.5e-4, 0.4))
    assert lrs["backbone.tok_emb.weight"] == pytest.approx((1e-3, 0.1))
    assert lrs["backbone.pos.embedding.weight"] == pytest.approx((1e-3, 0.1))
    for name in ("blocks.0.attn.qkv.bias", "blocks.0.attn_norm.weight", "final_norm.bias"):
        assert lrs[f"backbone.{name}"] == pytest.approx((1e-3, 0.0))


def test_sgd_steps_vectors_at_lr_times_m_and_hidden_matrices_at_lr() -> None:
    """microsoft/mup's MuSGD: embeddings, readouts, biases and gains at lr * m (decay / m),
    hidden matrices at lr, a readout's bias (finite) at lr."""
    model = _model(tie_embeddings=False)
    lrs = _lrs(model, functools.partial(torch.optim.SGD, lr=0.1, weight_decay=0.1))
    assert lrs["backbone.blocks.0.ffn.up.weight"] == pytest.approx((0.1, 0.1))
    assert lrs["backbone.tok_emb.weight"] == pytest.approx((0.4, 0.025))
    assert lrs["lm_head.weight"] == pytest.approx((0.4, 0.025))
    assert lrs["backbone.blocks.0.ffn.up.bias"] == pytest.approx((0.4, 0.0))


def test_at_its_base_width_mup_steps_as_sp() -> None:
    adamw = functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.1)
    ours, theirs = _lrs(_model(16), adamw), _lrs(_model(16, parametrization="sp"), adamw)
    assert ours == theirs


@pytest.mark.parametrize(
    "optimizer", [functools.partial(MuonWithAdamW), functools.partial(torch.optim.Adagrad)]
)
def test_an_optimizer_without_a_mup_rule_is_refused_naming_the_key(optimizer) -> None:
    with pytest.raises(ValueError, match=r"^model\.parametrization=mup has learning-rate rules"):
        optimizer_groups(_model(), optimizer)


def test_optim_muon_with_mup_is_refused_by_the_config_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError) as refused:
        compose_config(tmp_path, [*MUP, "optim=muon"])
    message = str(refused.value)
    assert message.startswith("model.parametrization=mup has learning-rate rules for optim.")
    assert "use optim=adamw, or model.parametrization=sp" in message and "\n" not in message


def test_a_mup_run_records_the_key_and_resumes_exactly(tmp_path: Path) -> None:
    """Four steps with a checkpoint at step 2, and a run resumed from it: the same weights,
    optimizer state and per-group learning rates; config.yaml holds the keys."""
    ours, theirs, run_dir = went_on_and_resumed(tmp_path, list(MUP))
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["model"]
    assert (saved["parametrization"], saved["mup_base_width"]) == ("mup", 32)
    assert_same_weights_and_optimizer_state(ours, theirs)
    groups = [(g["lr"], g["initial_lr"]) for g in theirs["optimizer_states"][0]["param_groups"]]
    assert groups == [
        (g["lr"], g["initial_lr"]) for g in ours["optimizer_states"][0]["param_groups"]
    ]
    assert len({initial for _, initial in groups}) > 1  # the hidden matrices' lr is its own


def test_the_coordinate_check_is_flat_under_mup_and_grows_under_sp() -> None:
    """A 2-layer decoder at widths 32 to 512, 4 AdamW steps (lr 3e-3) on random tokens. The
    slopes of log2 RMS against log2 width at step 4, measured over seeds 0, 1, 2:

        layer        sp (min .. max)   µP (min .. max)
        embedding    -0.02 .. -0.01    +0.01 .. +0.01
        block*.attn  +1.37 .. +1.90    -0.15 .. +0.04
        block*.ffn   +1.26 .. +1.51    -0.11 .. -0.08
        block*.out   +1.18 .. +1.23    -0.06 .. +0.01
        logits       +0.71 .. +0.76    -0.15 .. -0.12

    µP's are within 0.15 of flat, so |slope| < 0.25 leaves room for other seeds; sp's outputs
    grow at least as width^0.7 past the embedding (an input layer, the same in both), so
    slope > 0.5. At initialisation (step 1) µP's logits fall as width^-0.26: the readout's
    1/m on a weight drawn at a constant std, which the first steps' updates outgrow."""
    last = 4
    for parametrization in ("sp", "mup"):
        fitted = slopes(coord_check(parametrization, steps=last))
        at_last = {layer: s for (_, layer, step), s in fitted.items() if step == last}
        assert len(at_last) == 8  # embedding, 3 per block, logits
        for layer, slope in at_last.items():
            if parametrization == "mup":
                assert abs(slope) < 0.25, (layer, slope)
            elif layer != "embedding":
                assert slope > 0.5, (layer, slope)
