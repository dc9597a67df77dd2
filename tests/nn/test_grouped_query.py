"""Grouped-query and multi-query attention (`model.n_kv_heads`): the attention equals a plain
softmax(QK^T / sqrt(hs)) V in which each key/value head serves its n_heads / n_kv_heads
consecutive query heads, with and without padding; n_kv_heads = n_heads is the attention xfmr
always had; the KV cache holds n_kv_heads heads and decoding with it equals the full forward;
a Llama-style model exports to transformers' LlamaForCausalLM (num_key_value_heads) with equal
logits and imports back, and families without key/value heads refuse the key."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from xfmr.nn.attention import MultiHeadAttention
from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import build_model

pytestmark = pytest.mark.usefixtures("one_thread")
D, HEADS, VOCAB = 32, 4, 40


def reference(attention: MultiHeadAttention, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The attention written out: q, k, v from the fused weight, each key/value head repeated
    for its group of query heads, scores masked where `keep` (B, 1, T, S) is False."""
    B, T, _ = x.shape
    hs, kv = D // HEADS, attention.n_kv_heads
    q, k, v = (x @ attention.qkv.weight.T + attention.qkv.bias).split((D, kv * hs, kv * hs), -1)
    q = q.view(B, T, HEADS, hs).transpose(1, 2)
    k, v = (t.view(B, T, kv, hs).transpose(1, 2) for t in (k, v))
    k, v = (t[:, [h * kv // HEADS for h in range(HEADS)]] for t in (k, v))  # head h: group h // g
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    weights = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    y = (weights @ v).transpose(1, 2).reshape(B, T, D)
    return attention.out(y)


@pytest.mark.parametrize("kv", [4, 2, 1])
@torch.no_grad()
def test_grouped_attention_equals_the_written_out_reference(kv: int) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=D, n_heads=HEADS, n_kv_heads=kv).eval()
    assert attention.qkv.out_features == D + 2 * kv * (D // HEADS)
    x = torch.randn(3, 7, D)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    torch.testing.assert_close(
        attention(x, is_causal=True), reference(attention, x, causal), atol=1e-5, rtol=1e-5
    )
    lengths = torch.tensor([7, 4, 2])  # right padding: keys past a row's length are masked
    padding = (torch.arange(7) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
    torch.testing.assert_close(
        attention(x, mask=padding), reference(attention, x, padding), atol=1e-5, rtol=1e-5
    )


@torch.no_grad()
def test_as_many_kv_heads_as_heads_is_plain_multi_head_attention() -> None:
    torch.manual_seed(0)
    plain = MultiHeadAttention(d_model=D, n_heads=HEADS).eval()
    same = MultiHeadAttention(d_model=D, n_heads=HEADS, n_kv_heads=HEADS).eval()
    same.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, D)
    assert torch.equal(plain(x, is_causal=True), same(x, is_causal=True))
    assert torch.equal(
        plain(x, is_causal=True),
        F.scaled_dot_product_attention(
            *(
                t.view(2, 5, HEADS, D // HEADS).transpose(1, 2)
                for t in plain.qkv(x).split(D, dim=2)
            ),
            is_causal=True,
        )
        .transpose(1, 2)
        .reshape(2, 5, D)
        .matmul(plain.out.weight.T)
        + plain.out.bias,
    )


def _model(kv: int | None, pos: str = "rotary", **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=VOCAB, n_layers=2, n_heads=HEADS, n_kv_heads=kv, d_model=D,
                         pos=PosConfig(name=pos, max_positions=32), **overrides)  # fmt: skip
    return build_model(config).eval()


@pytest.mark.parametrize(("kv", "pos"), [(2, "rotary"), (1, "alibi"), (2, "learned")])
@torch.no_grad()
def test_the_cache_keeps_kv_heads_and_decoding_equals_the_full_forward(kv: int, pos: str) -> None:
    model = _model(kv, pos)
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    cache = KVCache()
    steps = [model(ids[:, :5], cache=cache)]
    steps += [model(ids[:, t : t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, 1), model(ids), atol=1e-5, rtol=1e-5)
    keys = cache.layers[0].keys
    assert keys.shape == (2, kv, 12, D // HEADS)
    full = _model(None, pos)
    full_cache = KVCache()
    full(ids, cache=full_cache)
    cached_bytes = sum(t.nbytes for layer in cache.layers for t in (layer.keys, layer.values))
    full_bytes = sum(t.nbytes for layer in full_cache.layers for t in (layer.keys, layer.values))
    assert cached_bytes * HEADS == full_bytes * kv  # n_kv_heads / n_heads of the full cache


def test_n_heads_must_be_a_multiple_of_n_kv_heads() -> None:
    with pytest.raises(ValueError, match=r"n_heads=4 is not a multiple of n_kv_heads=3: "
                                         r"choose n_kv_heads among \[1, 2, 4\]"):  # fmt: skip
        ModelConfig(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads is read by xfmr's own attention"):
        ModelConfig(n_kv_heads=2, attention={"_target_": "my.Attention"})


@pytest.mark.parametrize("kv", [2, 1])
@torch.no_grad()
def test_a_llama_model_with_kv_heads_exports_to_transformers_and_back(kv: int) -> None:
    pytest.importorskip("transformers")
    from xfmr.interop.hf import from_hf
    from xfmr.interop.hf_export import hf_family, to_hf

    model = _model(kv, norm="rmsnorm", activation="swiglu", bias=False, tie_embeddings=False)
    family = hf_family(model)
    assert family.hf_class == "LlamaForCausalLM"
    theirs = to_hf(model, family)
    assert theirs.config.num_key_value_heads == kv
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(theirs(ids).logits, model(ids), atol=1e-4, rtol=1e-4)
    back = from_hf(theirs)
    assert back.config.n_kv_heads == kv
    ours = model.state_dict()
    assert all(torch.equal(back.state_dict()[name], ours[name]) for name in ours)


def test_gpt2_refuses_kv_heads_naming_the_key() -> None:
    from xfmr.interop.hf_families import FAMILIES

    model = _model(2, pos="learned")
    assert "n_kv_heads=2" in FAMILIES["GPT2LMHeadModel"].differences(model.config)
