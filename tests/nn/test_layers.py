"""Norms and feed-forward variants: RMSNorm as in T5, gated activations as in T5 v1.1."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.layers import ACTIVATIONS, Block, FeedForward, RMSNorm, build_norm

D, D_FF = 16, 24


def test_rmsnorm_matches_formula() -> None:
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * weight, and only `weight` is a parameter."""
    norm = RMSNorm(D, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2.0, D))
    x = torch.randn(3, 5, D)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


def test_rmsnorm_does_not_subtract_the_mean() -> None:
    """Shifting a row changes RMSNorm's output but not LayerNorm's (so the two are distinguishable)."""
    x, shift = torch.randn(2, D), 3.0
    rms, layer = build_norm("rmsnorm", D, eps=1e-6, bias=True), nn.LayerNorm(D)
    assert not torch.allclose(rms(x + shift), rms(x), atol=1e-2)
    torch.testing.assert_close(layer(x + shift), layer(x), atol=1e-4, rtol=1e-4)


def test_rmsnorm_keeps_half_precision_dtype() -> None:
    """bf16 in, bf16 out (the mean square is taken in float32)."""
    x = torch.randn(2, D).bfloat16()
    assert RMSNorm(D).bfloat16()(x).dtype == torch.bfloat16


@pytest.mark.parametrize(("name", "count"), [("layernorm", 2 * D), ("rmsnorm", D)])
def test_norm_parameter_counts(name: str, count: int) -> None:
    """LayerNorm with bias has gain + bias; RMSNorm only a gain, whatever `bias` says."""
    assert sum(p.numel() for p in build_norm(name, D, eps=1e-5, bias=True).parameters()) == count


def test_build_norm_rejects_unknown_name() -> None:
    with pytest.raises(ValueError, match="norm='batchnorm'.*layernorm.*rmsnorm"):
        build_norm("batchnorm", D, eps=1e-5, bias=True)


@pytest.mark.parametrize(
    ("name", "act"),
    [("swiglu", nn.functional.silu), ("geglu", nn.functional.gelu)],
)
@torch.no_grad()
def test_gated_ffn_gates_the_first_half(name: str, act) -> None:
    """up projects to 2 * d_ff = [W0 | W1]; FFN(x) = W2 (act(x W0) * x W1) (T5 v1.1 wi_0 / wi_1)."""
    torch.manual_seed(0)
    ffn = FeedForward(d_model=D, d_ff=D_FF, activation=name, dropout=0.0, bias=True)
    assert ffn.up.weight.shape == (2 * D_FF, D) and ffn.down.weight.shape == (D, D_FF)
    x = torch.randn(2, 3, D)
    h = x @ ffn.up.weight.T + ffn.up.bias  # (B, T, 2 d_ff)
    gate, value = h[..., :D_FF], h[..., D_FF:]
    expected = (act(gate) * value) @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), expected)
    swapped = (act(value) * gate) @ ffn.down.weight.T + ffn.down.bias
    assert not torch.allclose(ffn(x), swapped, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "approximate"), [("gelu", "none"), ("gelu_tanh", "tanh"), ("geglu", "none")]
)
def test_gelu_variants(name: str, approximate: str) -> None:
    """gelu and geglu use the exact erf form, gelu_tanh GPT-2's tanh approximation."""
    act = ACTIVATIONS[name].make()
    assert isinstance(act, nn.GELU) and act.approximate == approximate


@pytest.mark.parametrize(
    ("name", "gated", "up_rows"),
    [("relu", False, D_FF), ("gelu", False, D_FF), ("swiglu", True, 2 * D_FF)],
)
def test_plain_and_gated_ffn_shapes(name: str, gated: bool, up_rows: int) -> None:
    ffn = FeedForward(d_model=D, d_ff=D_FF, activation=name, dropout=0.0, bias=False)
    assert ffn.gated is gated and ffn.up.weight.shape == (up_rows, D)
    assert ffn(torch.randn(2, 3, D)).shape == (2, 3, D)


def test_relu2_is_the_square_of_relu() -> None:
    x = torch.linspace(-3, 3, 13)
    assert torch.equal(ACTIVATIONS["relu2"].make()(x), torch.relu(x) ** 2)
    ffn = FeedForward(d_model=D, d_ff=D_FF, activation="relu2", dropout=0.0, bias=False)
    value = torch.randn(2, 3, D)
    expected = torch.relu(value @ ffn.up.weight.T).square() @ ffn.down.weight.T
    torch.testing.assert_close(ffn(value), expected)


def test_ffn_rejects_unknown_activation() -> None:
    with pytest.raises(ValueError, match="activation='tanhh'.*swiglu"):
        FeedForward(d_model=D, d_ff=D_FF, activation="tanhh", dropout=0.0, bias=True)


def _block(placement: str, cross: bool) -> Block:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=8, d_model=D, n_heads=4, d_ff=D_FF, activation="relu", placement=placement
    )
    return Block(config, cross_attention=cross).eval()


@pytest.mark.parametrize("placement", ["pre", "post"])
@torch.no_grad()
def test_decoder_block_is_self_then_cross_then_ffn(placement: str) -> None:
    """A cross-attending block equals its three sublayers composed by hand in that order."""
    block = _block(placement, cross=True)
    x, context = torch.randn(2, 5, D), torch.randn(2, 7, D)
    out = block(x, is_causal=True, context=context)
    if placement == "pre":
        h = x + block.attn(block.attn_norm(x), is_causal=True)
        h = h + block.cross_attn(block.cross_norm(h), context)
        expected = h + block.ffn(block.ffn_norm(h))
    else:
        h = block.attn_norm(x + block.attn(x, is_causal=True))
        h = block.cross_norm(h + block.cross_attn(h, context))
        expected = block.ffn_norm(h + block.ffn(h))
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, block(x, is_causal=True, context=context + 1.0), atol=1e-4)


def test_block_without_cross_attention_has_no_cross_parameters() -> None:
    names = {name.split(".")[0] for name, _ in _block("pre", cross=False).named_parameters()}
    assert names == {"attn_norm", "attn", "ffn_norm", "ffn"}
    names = {name.split(".")[0] for name, _ in _block("pre", cross=True).named_parameters()}
    assert names == {"attn_norm", "attn", "cross_norm", "cross_attn", "ffn_norm", "ffn"}
