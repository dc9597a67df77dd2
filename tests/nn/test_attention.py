"""Attention: MultiHeadAttention and its mask helpers (causality, padding, equivariance, a naive
reference), cross-attention, additive biases, score scaling, rotary inside attention, mask
folding, and that plain causal attention still takes SDPA's fast path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xfmr.nn.attention import CrossAttention, MultiHeadAttention
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.masks import causal_mask, combine_masks, fold_masks, padding_mask
from xfmr.nn.models import CausalLM
from xfmr.nn.positions import RotaryPositions, apply_rotary

D_MODEL, N_HEADS, T, S = 32, 4, 8, 6
HS = D_MODEL // N_HEADS
DEFAULT_SCALE = 1 / math.sqrt(HS)


# --- self-attention: causality, padding, equivariance, a naive reference --------------------------


def _mha(bias: bool = True) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(d_model=D_MODEL, n_heads=N_HEADS, bias=bias).eval()


def _x(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, D_MODEL, generator=gen)  # (B, T, C)


def _naive_mha(
    mha: MultiHeadAttention, x: torch.Tensor, *, causal: bool, key_mask=None
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_head)) V per head, written out with the module's own weights."""
    B, L, C = x.shape
    hs = C // mha.n_heads
    qkv = x @ mha.qkv.weight.T  # (B, L, 3C)
    if mha.qkv.bias is not None:
        qkv = qkv + mha.qkv.bias
    q, k, v = qkv[..., :C], qkv[..., C : 2 * C], qkv[..., 2 * C :]  # each (B, L, C)
    q, k, v = (
        t.reshape(B, L, mha.n_heads, hs).permute(0, 2, 1, 3) for t in (q, k, v)
    )  # (B, H, L, hs)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)  # (B, H, L, L)
    allowed = torch.ones(L, L, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(L, L).tril().bool()
    if key_mask is not None:
        allowed = allowed & key_mask.bool()[:, None, None, :]  # (B, 1, L, L)
    scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # (B, H, L, hs)
    y = y.permute(0, 2, 1, 3).reshape(B, L, C)  # (B, L, C)
    out = y @ mha.out.weight.T
    if mha.out.bias is not None:
        out = out + mha.out.bias
    return out


@pytest.mark.parametrize("with_mask", [False, True], ids=["sdpa_causal", "explicit_mask"])
@torch.no_grad()
def test_causal_output_ignores_future_tokens(with_mask: bool) -> None:
    """With is_causal, outputs up to t do not depend on tokens after t (fast path and mask path)."""
    mha, x, t = _mha(), _x(), 3
    x_changed = x.clone()
    x_changed[:, t + 1 :] = torch.randn(2, T - t - 1, D_MODEL)
    mask = padding_mask(torch.ones(2, T)) if with_mask else None
    out = mha(x, mask=mask, is_causal=True)
    out_changed = mha(x_changed, mask=mask, is_causal=True)
    torch.testing.assert_close(out_changed[:, : t + 1], out[:, : t + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(out_changed[:, t + 1 :], out[:, t + 1 :], atol=1e-3)


@torch.no_grad()
def test_non_causal_output_sees_future_tokens() -> None:
    """Without is_causal, later tokens change earlier outputs (so the causal test can fail)."""
    mha, x, t = _mha(), _x(), 3
    x_changed = x.clone()
    x_changed[:, t + 1 :] = torch.randn(2, T - t - 1, D_MODEL)
    assert not torch.allclose(mha(x_changed)[:, : t + 1], mha(x)[:, : t + 1], atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@torch.no_grad()
def test_right_padding_matches_unpadded_sequence(causal: bool) -> None:
    """Real positions of a right-padded batch equal each sequence run alone, garbage pads or not."""
    mha, x = _mha(), _x(seed=2)
    lengths = [5, T]
    attention_mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    x[0, lengths[0] :] = 100.0 * torch.randn(T - lengths[0], D_MODEL)  # garbage in padded slots
    out = mha(x, mask=padding_mask(attention_mask), is_causal=causal)
    for b, length in enumerate(lengths):
        alone = mha(x[b : b + 1, :length], is_causal=causal)  # (1, length, C)
        torch.testing.assert_close(out[b, :length], alone[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_padding_mask_is_needed_without_causality() -> None:
    """Without the key-padding mask, garbage in padded slots leaks into real positions."""
    mha, x, length = _mha(), _x(seed=2), 5
    x[0, length:] = 100.0 * torch.randn(T - length, D_MODEL)
    alone = mha(x[:1, :length])  # (1, length, C)
    assert not torch.allclose(mha(x)[0, :length], alone[0], atol=1e-3)


def test_padding_mask_shape_and_values() -> None:
    """padding_mask turns a (B, S) 0/1 mask into a boolean (B, 1, 1, S) key mask."""
    attention_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    mask = padding_mask(attention_mask)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[True, True, False], [True, True, True]]


def test_combine_masks_opens_fully_masked_rows() -> None:
    """A query row that left padding + causality would mask entirely becomes fully open."""
    attention_mask = torch.tensor([[0, 0, 0, 1, 1]])  # left padding, 3 pads
    plain = causal_mask(5) & padding_mask(attention_mask)  # (1, 1, 5, 5)
    assert not plain[0, 0, :3].any(dim=-1).any()  # the scenario really has empty rows
    combined = combine_masks(causal_mask(5), padding_mask(attention_mask))
    assert combined[0, 0, :3].all()
    torch.testing.assert_close(combined[0, 0, 3:], plain[0, 0, 3:])
    assert combine_masks(None, None) is None


@torch.no_grad()
def test_left_padding_with_causal_mask_has_no_nan() -> None:
    """Left padding + causal gives finite outputs, and real positions match the unpadded run."""
    mha, x, pads = _mha(), _x(seed=3), 3
    attention_mask = torch.ones(2, T, dtype=torch.long)
    attention_mask[0, :pads] = 0
    out = mha(x, mask=padding_mask(attention_mask), is_causal=True)
    assert torch.isfinite(out).all()
    alone = mha(x[:1, pads:], is_causal=True)  # (1, T - pads, C)
    torch.testing.assert_close(out[0, pads:], alone[0], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_fully_masked_query_rows_attend_to_every_key() -> None:
    """Padded query rows under left padding + causal are opened: they equal unmasked attention.

    (Recent CPU SDPA returns zeros, not NaN, for empty rows, so finiteness alone cannot tell.)
    """
    mha, x, pads = _mha(), _x(seed=3), 3
    attention_mask = torch.ones(2, T, dtype=torch.long)
    attention_mask[0, :pads] = 0
    out = mha(x, mask=padding_mask(attention_mask), is_causal=True)
    open_rows = _naive_mha(mha, x, causal=False)[0, :pads]  # (pads, C)
    torch.testing.assert_close(out[0, :pads], open_rows, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_attention_is_permutation_equivariant_without_causality() -> None:
    """MHA(P X) = P MHA(X) for a permutation P of positions when no mask is applied."""
    mha, x = _mha(), _x(seed=4)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(5))
    assert not torch.equal(perm, torch.arange(T))
    torch.testing.assert_close(mha(x[:, perm]), mha(x)[:, perm], atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_causal_attention_is_not_permutation_equivariant() -> None:
    """The causal mask breaks equivariance (so the equivariance test can fail)."""
    mha, x = _mha(), _x(seed=4)
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(5))
    assert not torch.allclose(
        mha(x[:, perm], is_causal=True), mha(x, is_causal=True)[:, perm], atol=1e-3
    )


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@torch.no_grad()
def test_matches_naive_reference(causal: bool, bias: bool) -> None:
    """Output equals an explicit per-head softmax(QK^T/sqrt(d_head))V with the module's weights."""
    mha, x = _mha(bias=bias), _x(seed=6)
    torch.testing.assert_close(
        mha(x, is_causal=causal), _naive_mha(mha, x, causal=causal), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
@torch.no_grad()
def test_matches_naive_reference_with_padding_mask(causal: bool) -> None:
    """With a right-padding key mask, real positions equal the naive masked reference."""
    mha, x = _mha(), _x(seed=7)
    attention_mask = torch.tensor([[1] * 5 + [0] * (T - 5), [1] * T])
    out = mha(x, mask=padding_mask(attention_mask), is_causal=causal)
    ref = _naive_mha(mha, x, causal=causal, key_mask=attention_mask)
    torch.testing.assert_close(out[0, :5], ref[0, :5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[1], ref[1], atol=1e-5, rtol=1e-5)


def test_rejects_d_model_not_divisible_by_heads() -> None:
    """MultiHeadAttention refuses a width that does not split evenly across heads."""
    with pytest.raises(ValueError, match="d_model=30.*n_heads=4"):
        MultiHeadAttention(d_model=30, n_heads=4)


# --- cross-attention, biases, scaling, rotary, mask folding, SDPA's fast path ---------------------


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
