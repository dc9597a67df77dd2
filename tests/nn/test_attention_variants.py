"""Sliding windows, soft-caps, sandwich norms and RoPE scaling, each held to a plain reference:
softmax(s(q k^T)) v written out here, not through xfmr's own score code."""

from __future__ import annotations

import pytest
import torch

from xfmr.nn.attention import MultiHeadAttention
from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig
from xfmr.nn.flex import flex_softcapped
from xfmr.nn.masks import fold_masks, padding_mask, window_mask
from xfmr.nn.models import CausalLM
from xfmr.nn.positions import AlibiPositions
from xfmr.nn.rope import RopeScaling, rope_frequencies

D, H, T = 32, 4, 12


def reference(q, k, v, allowed, *, cap=None, bias=None):
    """softmax(cap tanh(q k^T / sqrt(d) / cap) + bias, where allowed) v, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias.double()
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v).float()


def _allowed(window, causal, lengths):
    """(B, 1, T, T): within the window (and causal) and onto a real key; a query with no key
    at all (a padding position) sees every key, as xfmr's masks open it."""
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]  # written here, not window_mask
    near = (t - s).abs() < window if window else torch.ones(T, T, dtype=torch.bool)
    if causal:
        near = near & (s <= t)
    real = torch.arange(T)[None, :] >= T - torch.tensor(lengths)[:, None]  # left padding
    allowed = near[None, None] & real[:, None, None, :]
    return allowed | ~allowed.any(-1, keepdim=True), real.long()


def _heads(attention, x):
    B = x.size(0)
    q, k, v = attention.qkv(x).split(D, dim=2)
    return [t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("cap", [None, 2.0])
@pytest.mark.parametrize("padded", [False, True])
def test_attention_equals_the_written_out_reference(causal, window, cap, padded):
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=D, n_heads=H, softcap=cap).eval()
    x = torch.randn(2, T, D)
    allowed, attention_mask = _allowed(window, causal, [T, 7] if padded else [T, T])
    near = window_mask(T, window, causal=causal) if window else None
    mask, is_causal = fold_masks(
        _combine(near, padding_mask(attention_mask) if padded else None),
        None,
        is_causal=causal,
        query_length=T,
        key_length=T,
    )
    with torch.no_grad():
        got = attention(x, mask=mask, is_causal=is_causal)
        q, k, v = _heads(attention, x)
        expected = reference(q, k, v, allowed, cap=cap)
        expected = attention.out(expected.transpose(1, 2).reshape(2, T, D))
    real = attention_mask.bool()  # a padding query's output is ignored downstream
    assert (got - expected)[real].abs().max() < 1e-5


def _combine(*masks):
    present = [m for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out | ~out.any(-1, keepdim=True)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("biased", [False, True])
def test_flex_attention_equals_the_reference(causal, padded, biased):
    """FlexAttention's soft-capped path (eager here: no backward on a CPU, compiled on a GPU)
    with a window, padding and a positional bias folded into one float mask."""
    torch.manual_seed(1)
    q, k, v = torch.randn(3, 2, H, T, 8).unbind(0)
    allowed, attention_mask = _allowed(5, causal, [T, 6] if padded else [T, T])
    bias = AlibiPositions(n_heads=H).attention_bias(T, key_length=T) if biased else None
    mask, is_causal = fold_masks(
        _combine(window_mask(T, 5, causal=causal), padding_mask(attention_mask)),
        bias,
        is_causal=causal,
        query_length=T,
        key_length=T,
    )
    got = flex_softcapped(q, k, v, mask, is_causal=is_causal, scale=None, cap=3.0)
    difference = (got - reference(q, k, v, allowed, cap=3.0, bias=bias)).transpose(1, 2)
    assert difference[attention_mask.bool()].abs().max() < 1e-5  # at every real query


def _lm(**settings) -> CausalLM:
    torch.manual_seed(0)
    shape = dict(vocab_size=50, n_layers=4, n_heads=4, d_model=32, pos={"name": "rotary"})
    config = ModelConfig(**{**shape, **settings})
    return CausalLM(config).eval()


@pytest.mark.parametrize(
    "settings",
    [
        dict(window=4),
        dict(window=4, global_every=2, n_kv_heads=2, attn_softcap=5.0, logit_softcap=3.0),
        dict(window=3, placement="sandwich", norm="rmsnorm"),
    ],
    ids=["window", "gemma-like", "sandwich"],
)
def test_cached_decoding_equals_the_full_forward_past_the_window(settings):
    model = _lm(**settings)
    ids = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache()
        steps = [model(ids[:, :5], cache=cache)]  # a prefill longer than the window
        steps += [model(ids[:, t : t + 1], cache=cache) for t in range(5, 20)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    window = settings["window"]
    for index, layer in enumerate(cache.layers):
        kept = window - 1 if model.config.window_of(index) else 20
        assert layer.keys.size(2) == kept, index
        assert layer.keys.size(1) == (settings.get("n_kv_heads") or 4)
    assert cache.length == 20


def test_the_cache_is_the_size_the_model_implies():
    ids = torch.randint(0, 50, (1, 40))
    sizes = {}
    for name, settings in {"mha": {}, "gqa": dict(n_kv_heads=2), "mqa": dict(n_kv_heads=1),
                           "window": dict(window=8)}.items():  # fmt: skip
        cache = KVCache()
        with torch.no_grad():
            _lm(**settings)(ids, cache=cache)
        sizes[name] = cache.nbytes
    full = 4 * 2 * 40 * 32 * 4  # layers * (k, v) * positions * width * float32 bytes
    assert sizes == {"mha": full, "gqa": full // 2, "mqa": full // 4, "window": full * 7 // 40}


def test_a_window_changes_what_a_query_sees_and_only_that():
    ids = torch.randint(0, 50, (1, 12))
    with torch.no_grad():  # the same weights: a window adds no parameter
        windowed, full = _lm(window=4)(ids), _lm()(ids)
    assert (windowed[:, :4] - full[:, :4]).abs().max() < 1e-5  # the first 4 see all they can
    assert (windowed[:, 4:] - full[:, 4:]).abs().max() > 1e-3


def test_windowed_soft_capped_attention_trains_on_a_cpu():
    """The written-out path has a backward (FlexAttention has none on a CPU)."""
    model = _lm(window=4, global_every=2, attn_softcap=5.0, logit_softcap=3.0).train()
    ids = torch.randint(0, 50, (4, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_soft_caps_bound_logits_and_equal_cap_tanh():
    capped, plain = _lm(logit_softcap=0.5), _lm()
    ids = torch.randint(0, 50, (1, 6))
    with torch.no_grad():
        got, raw = capped(ids), plain(ids)
    assert got.abs().max() < 0.5
    assert (got - 0.5 * torch.tanh(raw / 0.5)).abs().max() < 1e-6


def test_sandwich_blocks_have_four_norms_and_a_final_norm():
    model = _lm(placement="sandwich")
    block = model.backbone.blocks[0]
    norms = [block.attn_norm, block.attn_post_norm, block.ffn_norm, block.ffn_post_norm]
    assert all(isinstance(n, torch.nn.LayerNorm) for n in norms)
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        middle = x + block.attn_post_norm(block.attn(block.attn_norm(x), is_causal=True))
        expected = middle + block.ffn_post_norm(block.ffn(block.ffn_norm(middle)))
        assert (block(x, is_causal=True) - expected).abs().max() < 1e-6
    assert isinstance(model.backbone.final_norm, torch.nn.LayerNorm)


def test_global_every_picks_the_global_layers():
    config = ModelConfig(vocab_size=8, n_layers=6, window=4, global_every=3)
    assert [config.window_of(i) for i in range(6)] == [4, 4, None, 4, 4, None]
    assert ModelConfig(vocab_size=8, window=4).window_of(3) == 4


@pytest.mark.parametrize("kind", ["linear", "llama3"])
def test_rope_scaling_equals_transformers(kind):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    parameters = {"rope_type": kind, "factor": 4.0, "rope_theta": 10000.0}
    if kind == "llama3":
        parameters |= dict(
            low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32
        )
    hf = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, rope_parameters=parameters)
    expected, _ = ROPE_INIT_FUNCTIONS[kind](hf, "cpu")
    ours = rope_frequencies(32, 10000.0, RopeScaling(kind, 4.0, 1.0, 4.0, 32))
    assert (ours - expected).abs().max() < 1e-7
    assert (ours - rope_frequencies(32, 10000.0)).abs().max() > 0  # it scaled something


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(window=0), "window=0 must be a positive integer"),
        (dict(global_every=2), "set model.window"),
        (dict(attn_softcap=-1.0), "attn_softcap=-1.0 must be a number > 0"),
        (dict(pos={"name": "learned", "rope_scaling": "llama3"}), "use pos=rotary"),
        (dict(pos={"name": "rotary", "rope_scaling": "linear", "rope_factor": 0.5}), ">= 1"),
        (dict(placement="sideways"), "placement"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(vocab_size=8, **settings)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("d_model", [64, 32])  # heads of 16, and of 8: too narrow for Flex
def test_compiled_flex_attention_on_a_gpu_equals_the_written_path(d_model):
    """On a GPU a soft-capped model trains on compiled FlexAttention (heads of 16 or more; a
    narrower head takes the written-out softmax); its outputs and gradients are the written-out
    softmax's (`record_attention` forces that path)."""
    from xfmr.nn.attention import record_attention

    settings = dict(window=4, global_every=2, attn_softcap=5.0, n_kv_heads=2, d_model=d_model)
    model = _lm(**settings).cuda().train()
    ids = torch.randint(0, 50, (2, 16), device="cuda")
    results = []
    for written in (False, True):
        model.zero_grad()
        if written:
            with record_attention(model):
                logits = model(ids)
        else:
            logits = model(ids)
        logits.square().mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (flex, flex_grads), (plain, plain_grads) = results
    assert (flex - plain).abs().max() < 1e-4
    for a, b in zip(flex_grads, plain_grads, strict=True):
        assert (a - b).abs().max() < 1e-4
