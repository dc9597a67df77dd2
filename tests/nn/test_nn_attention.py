"""Cross-attention, additive biases, score scaling, rotary inside attention, mask folding, and
that plain causal attention still takes SDPA's fast path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xfmr.nn.attention import (
    CrossAttention,
    MultiHeadAttention,
    causal_mask,
    fold_masks,
    padding_mask,
)
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import CausalLM
from xfmr.nn.positions import RotaryPositions, apply_rotary

D_MODEL, N_HEADS, T, S = 32, 4, 8, 6
HS = D_MODEL // N_HEADS
DEFAULT_SCALE = 1 / math.sqrt(HS)


def _x(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, D_MODEL, generator=gen)  # (B, L, C)


def _linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    y = x @ layer.weight.T
    return y if layer.bias is None else y + layer.bias


def _split(t: torch.Tensor) -> torch.Tensor:
    B, L, _ = t.shape
    return t.reshape(B, L, N_HEADS, HS).permute(0, 2, 1, 3)  # (B, H, L, hs)


def _naive(q, k, v, out, *, scale, allowed=None, bias=None) -> torch.Tensor:
    """softmax(scale * Q K^T + bias, masked) V per head, then the output projection."""
    scores = scale * q @ k.transpose(-1, -2)  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B, H, T, hs)
    B, H, L, hs = y.shape
    return _linear(out, y.permute(0, 2, 1, 3).reshape(B, L, H * hs))


def _naive_self(mha, x, *, scale=DEFAULT_SCALE, allowed=None, bias=None, rotation=None):
    qkv = _linear(mha.qkv, x)
    q, k, v = (_split(t) for t in qkv.split(D_MODEL, dim=-1))
    if rotation is not None:
        q, k = apply_rotary(q, *rotation), apply_rotary(k, *rotation)
    return _naive(q, k, v, mha.out, scale=scale, allowed=allowed, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
@torch.no_grad()
def test_cross_attention_matches_naive_reference(bias: bool) -> None:
    """Queries from x, keys/values from the context through one fused kv projection, source mask."""
    torch.manual_seed(0)
    cross = CrossAttention(d_model=D_MODEL, n_heads=N_HEADS, bias=bias).eval()
    assert cross.kv.weight.shape == (2 * D_MODEL, D_MODEL) and cross.q.weight.shape[0] == D_MODEL
    x, context = _x(), _x(length=S, seed=2)
    source_mask = torch.tensor([[1] * 4 + [0] * (S - 4), [1] * S])
    out = cross(x, context, mask=padding_mask(source_mask))
    k, v = (_split(t) for t in _linear(cross.kv, context).split(D_MODEL, dim=-1))
    ref = _naive(
        _split(_linear(cross.q, x)),
        k,
        v,
        cross.out,
        scale=DEFAULT_SCALE,
        allowed=padding_mask(source_mask),
    )
    assert out.shape == (2, T, D_MODEL)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_cross_attention_uses_the_source_mask() -> None:
    """Garbage in masked source slots leaves the output unchanged; unmasked, it does not."""
    torch.manual_seed(0)
    cross = CrossAttention(d_model=D_MODEL, n_heads=N_HEADS).eval()
    x, context = _x(batch=1), _x(batch=1, length=S, seed=2)
    source_mask = torch.tensor([[1] * 4 + [0] * (S - 4)])
    noisy = context.clone()
    noisy[:, 4:] = 100 * torch.randn(1, S - 4, D_MODEL)
    masked = padding_mask(source_mask)
    torch.testing.assert_close(cross(x, noisy, mask=masked), cross(x, context, mask=masked))
    assert not torch.allclose(cross(x, noisy), cross(x, context), atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_padding", [False, True])
@torch.no_grad()
def test_self_attention_with_bias_matches_naive(causal: bool, with_padding: bool) -> None:
    """An additive (1, H, T, T) bias lands on the scores, with causality and padding applied."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=D_MODEL, n_heads=N_HEADS).eval()
    x, bias = _x(), torch.randn(1, N_HEADS, T, T)
    key_mask = torch.tensor([[1] * 5 + [0] * (T - 5), [1] * T])
    mask = padding_mask(key_mask) if with_padding else None
    out = mha(x, mask=mask, bias=bias, is_causal=causal)
    allowed = torch.ones(1, 1, T, T, dtype=torch.bool)
    if causal:
        allowed = allowed & causal_mask(T)
    if with_padding:
        allowed = allowed & padding_mask(key_mask)
    ref = _naive_self(mha, x, allowed=allowed, bias=bias)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out, mha(x, mask=mask, is_causal=causal), atol=1e-3)


@torch.no_grad()
def test_unscaled_attention_matches_naive_without_sqrt_d() -> None:
    """scale=1.0 (T5) gives softmax(Q K^T) V, unlike the default 1/sqrt(d_head)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=D_MODEL, n_heads=N_HEADS, scale=1.0).eval()
    x = _x()
    out = mha(x, is_causal=True)
    torch.testing.assert_close(
        out, _naive_self(mha, x, scale=1.0, allowed=causal_mask(T)), atol=1e-5, rtol=1e-5
    )
    mha.scale = None
    assert not torch.allclose(mha(x, is_causal=True), out, atol=1e-3)


@torch.no_grad()
def test_rotary_attention_matches_naive_and_ignores_a_common_shift() -> None:
    """Rotation of q and k inside attention: equals the naive reference, and shifting every
    position by k (the offset a KV cache will use) leaves the output unchanged."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=D_MODEL, n_heads=N_HEADS).eval()
    rotary = RotaryPositions(d_model=D_MODEL, n_heads=N_HEADS)
    x = _x()
    out = mha(x, is_causal=True, rotation=rotary.rotation(T))
    ref = _naive_self(mha, x, allowed=causal_mask(T), rotation=rotary.rotation(T))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    shifted = mha(x, is_causal=True, rotation=rotary.rotation(T, offset=13))
    torch.testing.assert_close(shifted, out, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(mha(x, is_causal=True), out, atol=1e-3)


def test_fold_masks_leaves_nothing_to_fold_alone() -> None:
    """No bias and (no mask or no causality): the inputs come back as they were."""
    key_mask = padding_mask(torch.tensor([[1, 1, 0]]))
    assert fold_masks(None, None, is_causal=True, query_length=3, key_length=3) == (None, True)
    mask, causal = fold_masks(key_mask, None, is_causal=False, query_length=3, key_length=3)
    assert mask is key_mask and causal is False


def test_fold_masks_causal_bias_and_padding() -> None:
    """Bias + causal + padding: one float mask, bias where allowed, -inf elsewhere."""
    bias = torch.arange(9.0).reshape(1, 1, 3, 3)
    key_mask = padding_mask(torch.tensor([[1, 1, 0]]))
    mask, causal = fold_masks(key_mask, bias, is_causal=True, query_length=3, key_length=3)
    inf = float("-inf")
    expected = torch.tensor([[0.0, inf, inf], [3.0, 4.0, inf], [6.0, 7.0, inf]])
    assert causal is False and mask.dtype == torch.float32
    torch.testing.assert_close(mask[0, 0], expected)


def test_fold_masks_opens_all_padding_rows_under_a_bias() -> None:
    """A sequence that is all padding gets its rows opened, not filled with -inf (NaN in SDPA)."""
    bias = torch.zeros(1, 1, 3, 3)
    key_mask = padding_mask(torch.tensor([[0, 0, 0], [1, 1, 0]]))
    mask, _ = fold_masks(key_mask, bias, is_causal=False, query_length=3, key_length=3)
    assert torch.isfinite(mask[0]).all()
    assert torch.isinf(mask[1, 0, :, 2]).all()


def test_causal_mask_with_longer_keys_aligns_queries_to_the_end() -> None:
    """With S > T (a KV cache), query t sits at key position t + S - T."""
    mask = causal_mask(2, key_length=5)
    assert mask.tolist() == [[True, True, True, True, False], [True] * 5]
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())


def _record_sdpa(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "none", "rotary"])
@torch.no_grad()
def test_plain_causal_path_keeps_sdpa_fast_kernel(pos: str, monkeypatch) -> None:
    """A decoder with no mask and no bias calls SDPA with is_causal=True and no attn_mask."""
    config = ModelConfig(
        vocab_size=50, n_layers=3, n_heads=N_HEADS, d_model=D_MODEL, pos=PosConfig(name=pos)
    )
    model = CausalLM(config).eval()
    calls = _record_sdpa(monkeypatch)
    model(torch.randint(0, 50, (2, T)))
    assert len(calls) == 3
    assert all(c["is_causal"] is True and c["attn_mask"] is None for c in calls)


@pytest.mark.parametrize("pos", ["relative", "alibi"])
@torch.no_grad()
def test_bias_schemes_pass_one_shared_float_mask(pos: str, monkeypatch) -> None:
    """With a positional bias, every layer gets the very same folded float mask (built once)."""
    config = ModelConfig(
        vocab_size=50, n_layers=3, n_heads=N_HEADS, d_model=D_MODEL, pos=PosConfig(name=pos)
    )
    model = CausalLM(config).eval()
    calls = _record_sdpa(monkeypatch)
    model(torch.randint(0, 50, (2, T)))
    masks = [c["attn_mask"] for c in calls]
    assert len(masks) == 3 and all(c["is_causal"] is False for c in calls)
    assert masks[0].is_floating_point() and masks[0].shape == (1, N_HEADS, T, T)
    assert all(m is masks[0] for m in masks)
    assert torch.isinf(masks[0][0, :, 0, 1:]).all()  # the causal mask is in it
