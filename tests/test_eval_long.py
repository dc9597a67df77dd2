"""Evaluating past the trained length: a causal model run on longer windows than it trained on
keeps what it computed on the shorter ones (the contract that makes extrapolation meaningful)."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import randomize
from xfmr.nn import ModelConfig, PosConfig, build_model
from xfmr.nn.config import EXTENDING_POSITIONS, POS_NAMES
from xfmr.nn.positions import SinusoidalPositions, extend_positions

pytestmark = pytest.mark.usefixtures("one_thread")

TRAINED = 16  # data.block_size of every run here
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _model(pos: str, *, arch: str = "decoder") -> torch.nn.Module:
    """A tiny causal model whose tables, where it has any, hold the trained length alone."""
    config = ModelConfig(
        vocab_size=50,
        arch=arch,
        n_layers=2,
        n_heads=2,
        d_model=32,
        pos=PosConfig(name=pos, max_positions=TRAINED),
    )
    return randomize(build_model(config), std=0.3)


# --- the model: longer windows leave the first positions as they were ---------------------


@pytest.mark.parametrize(
    ("arch", "pos"), [*(("decoder", name) for name in EXTENDING_POSITIONS), ("rnn", "none")]
)
def test_a_causal_model_run_longer_gives_the_same_logits_on_the_first_positions(
    arch: str, pos: str
) -> None:
    """Built at 16 positions, run at 64: the first 16 logits are those of a run at 16, and
    readying the model for 64 changes no weight."""
    model = _model(pos, arch=arch)
    ids = torch.randint(0, 50, (2, 4 * TRAINED), generator=torch.Generator().manual_seed(0))
    weights = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        short = model(ids[:, :TRAINED])
        extend_positions(model, 4 * TRAINED)
        long = model(ids)
    assert long.shape == (2, 4 * TRAINED, 50)
    torch.testing.assert_close(long[:, :TRAINED], short, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(long).all()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_a_sinusoid_table_grows_by_its_formula_and_keeps_its_rows() -> None:
    model = _model("sinusoidal")
    with pytest.raises(ValueError, match="extend_positions"):
        model(torch.zeros(1, TRAINED + 1, dtype=torch.long))
    scheme = next(m for m in model.modules() if isinstance(m, SinusoidalPositions))
    before = scheme.table.clone()
    extend_positions(model, 4 * TRAINED)
    assert scheme.max_positions == 4 * TRAINED
    assert torch.equal(scheme.table[:TRAINED], before)  # bit for bit
    built_long = SinusoidalPositions(
        d_model=32, max_positions=4 * TRAINED, sinusoid_scale=scheme.scale
    )
    torch.testing.assert_close(scheme.table, built_long.table, rtol=0, atol=1e-7)
    assert scheme.scale == pytest.approx(0.02)  # init_std: the table kept the model's scale


def test_only_learned_positions_cannot_extend_past_their_table() -> None:
    for pos in POS_NAMES:
        model = _model(pos)
        extend_positions(model, TRAINED)  # within any table: nothing to do
        if pos in EXTENDING_POSITIONS:
            extend_positions(model, 4 * TRAINED)
        else:
            with pytest.raises(ValueError, match="16 learned positions"):
                extend_positions(model, 4 * TRAINED)
