"""MultiHeadAttention and its mask helpers: causality, padding, equivariance, a naive reference."""

from __future__ import annotations

import math

import pytest
import torch

from xfmr.nn.attention import MultiHeadAttention, causal_mask, combine_masks, padding_mask

D_MODEL, N_HEADS, T = 32, 4, 8


def _mha(bias: bool = True) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(d_model=D_MODEL, n_heads=N_HEADS, bias=bias).eval()


def _x(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, D_MODEL, generator=gen)  # (B, T, C)


def _naive(
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
    open_rows = _naive(mha, x, causal=False)[0, :pads]  # (pads, C)
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
        mha(x, is_causal=causal), _naive(mha, x, causal=causal), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
@torch.no_grad()
def test_matches_naive_reference_with_padding_mask(causal: bool) -> None:
    """With a right-padding key mask, real positions equal the naive masked reference."""
    mha, x = _mha(), _x(seed=7)
    attention_mask = torch.tensor([[1] * 5 + [0] * (T - 5), [1] * T])
    out = mha(x, mask=padding_mask(attention_mask), is_causal=causal)
    ref = _naive(mha, x, causal=causal, key_mask=attention_mask)
    torch.testing.assert_close(out[0, :5], ref[0, :5], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[1], ref[1], atol=1e-5, rtol=1e-5)


def test_rejects_d_model_not_divisible_by_heads() -> None:
    """MultiHeadAttention refuses a width that does not split evenly across heads."""
    with pytest.raises(ValueError, match="d_model=30.*n_heads=4"):
        MultiHeadAttention(d_model=30, n_heads=4)
