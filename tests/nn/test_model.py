"""CausalLM from a ModelConfig: shapes, causality, padding (also in an encoder, where right pads
are attended unless masked), tying, parameter count, config."""

from __future__ import annotations

import pytest
import torch

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import CausalLM, build_model

VOCAB, T = 50, 12


def _model(**overrides) -> CausalLM:
    torch.manual_seed(0)
    values = dict(
        vocab_size=VOCAB,
        n_layers=2,
        n_heads=4,
        d_model=32,
        pos=PosConfig(name="learned", max_positions=16),
    )
    return CausalLM(ModelConfig(**{**values, **overrides})).eval()


def _encoder() -> torch.nn.Module:
    """A bidirectional encoder of the same shape (pre-LN, learned positions), in eval mode."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=VOCAB,
        arch="encoder",
        n_layers=2,
        n_heads=4,
        d_model=32,
        pos=PosConfig(name="learned", max_positions=16),
    )
    return build_model(config).eval()


def _ids(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_logits_shape() -> None:
    """input_ids (B, T) give logits (B, T, vocab_size)."""
    assert _model()(_ids(3, 7)).shape == (3, 7, VOCAB)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "none"])
@torch.no_grad()
def test_past_logits_ignore_future_tokens(pos: str) -> None:
    """Changing tokens after t leaves logits at positions <= t unchanged, and changes later ones."""
    model = _model(pos=PosConfig(name=pos, max_positions=16))
    ids, t = _ids(), 5
    changed = ids.clone()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + 1) % VOCAB
    logits, logits_changed = model(ids), model(changed)
    torch.testing.assert_close(logits_changed[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=0)
    assert not torch.allclose(logits_changed[:, t + 1 :], logits[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@torch.no_grad()
def test_right_padding_matches_unpadded_sequences(arch: str) -> None:
    """With attention_mask, the real positions of a right-padded batch equal each sequence run
    alone.

    In the bidirectional encoder every position attends to the pads unless the mask hides them,
    so there the test holds only if the mask is applied (checked: without it the padded row
    differs). In the decoder causality already hides right pads; there it holds only if a mask
    adds to causality rather than replacing it (the pads and later tokens are future keys).
    """
    model = _model() if arch == "decoder" else _encoder()
    lengths = [7, T]
    ids = _ids()
    attention_mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    logits = model(ids, attention_mask)
    for b, length in enumerate(lengths):
        alone = model(ids[b : b + 1, :length])  # (1, length, V)
        torch.testing.assert_close(logits[b, :length], alone[0], atol=1e-5, rtol=1e-5)
    if arch == "encoder":
        unmasked = model(ids)[0, : lengths[0]]
        alone = model(ids[:1, : lengths[0]])[0]
        assert not torch.allclose(unmasked, alone, atol=1e-3), "unmasked, the pads are attended"


@torch.no_grad()
def test_left_padding_uses_attention_mask() -> None:
    """Without positions, left-padded real tokens match the unpadded run only if the mask is used.

    (Right padding cannot reach real positions under causality, so this is the test with teeth.)
    """
    model = _model(pos=PosConfig(name="none", max_positions=None))
    pads, ids = 4, _ids(1)
    attention_mask = torch.ones(1, T, dtype=torch.long)
    attention_mask[0, :pads] = 0
    alone = model(ids[:, pads:])  # (1, T - pads, V)
    masked = model(ids, attention_mask)
    assert torch.isfinite(masked).all()
    torch.testing.assert_close(masked[:, pads:], alone, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(model(ids)[:, pads:], alone, atol=1e-3)


def test_tied_embeddings_share_storage() -> None:
    """tie_embeddings=True makes lm_head.weight the very tensor of the token embedding."""
    model = _model(tie_embeddings=True)
    assert model.lm_head.weight is model.backbone.tok_emb.weight
    assert model.lm_head.weight.data_ptr() == model.backbone.tok_emb.weight.data_ptr()


def test_untied_embeddings_are_separate() -> None:
    """tie_embeddings=False gives the LM head its own weight."""
    model = _model(tie_embeddings=False)
    assert model.lm_head.weight is not model.backbone.tok_emb.weight
    assert model.lm_head.weight.data_ptr() != model.backbone.tok_emb.weight.data_ptr()
    assert not torch.equal(model.lm_head.weight, model.backbone.tok_emb.weight)


def _nanogpt_char_config(tie: bool = True) -> ModelConfig:
    return ModelConfig(
        vocab_size=65,
        n_layers=4,
        n_heads=4,
        d_model=128,
        bias=False,
        tie_embeddings=tie,
        pos=PosConfig(name="learned", max_positions=64),
    )


def _expected_nanogpt_char_params() -> int:
    vocab, d, n_layers, block, d_ff = 65, 128, 4, 64, 4 * 128
    embeddings = vocab * d + block * d  # token + learned position tables
    per_layer = (
        2 * d  # attn_norm and ffn_norm weights (no bias)
        + d * 3 * d  # fused qkv
        + d * d  # attention output projection
        + 2 * d * d_ff  # ffn up + down
    )
    final_norm = d
    return embeddings + n_layers * per_layer + final_norm  # lm_head is tied: not counted again


def test_parameter_count_nanogpt_shakespeare_char() -> None:
    """The nanoGPT shakespeare-char shape has exactly the hand-counted number of parameters."""
    model = CausalLM(_nanogpt_char_config())
    expected = _expected_nanogpt_char_params()
    assert expected == 804_096  # 16_512 embeddings + 4 * 196_864 + 128
    assert model.num_parameters() == expected
    unique = {id(p): p.numel() for p in model.parameters()}
    assert sum(unique.values()) == expected


def test_parameter_count_untied_adds_lm_head() -> None:
    """Untying adds exactly one vocab x d_model matrix."""
    model = CausalLM(_nanogpt_char_config(tie=False))
    assert model.num_parameters() == _expected_nanogpt_char_params() + 65 * 128


@torch.no_grad()
def test_post_ln_builds_and_runs() -> None:
    """placement=post builds, gives finite logits, and ends in a LayerNorm (unit-variance rows)."""
    model = _model(placement="post")
    logits = model(_ids())
    assert logits.shape == (2, T, VOCAB)
    assert torch.isfinite(logits).all()
    hidden = model.backbone(_ids())  # (B, T, C), output of the last block's LayerNorm
    torch.testing.assert_close(hidden.mean(-1), torch.zeros(2, T), atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden.var(-1, unbiased=False), torch.ones(2, T), atol=1e-3, rtol=0)


@torch.no_grad()
def test_post_ln_is_also_causal() -> None:
    """Post-LN placement keeps past logits independent of future tokens."""
    model = _model(placement="post")
    ids, t = _ids(), 4
    changed = ids.clone()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + 1) % VOCAB
    torch.testing.assert_close(
        model(changed)[:, : t + 1], model(ids)[:, : t + 1], atol=1e-5, rtol=0
    )


def test_config_rejects_d_model_not_divisible_by_heads() -> None:
    """d_model % n_heads != 0 is a ValueError whose message names both numbers."""
    with pytest.raises(ValueError) as info:
        ModelConfig(vocab_size=VOCAB, d_model=30, n_heads=7)
    message = str(info.value)
    assert "30" in message and "7" in message


def test_config_from_dict_rejects_unknown_key() -> None:
    """from_dict names the unknown key and lists the valid ones."""
    with pytest.raises(ValueError, match="d_modle") as info:
        ModelConfig.from_dict({"vocab_size": VOCAB, "d_modle": 64})
    for key in ("d_model", "n_heads", "vocab_size", "placement"):
        assert key in str(info.value)


def test_config_from_dict_rejects_unknown_pos_key() -> None:
    """An unknown key inside pos is rejected with the valid pos keys listed."""
    with pytest.raises(ValueError, match="max_postions") as info:
        ModelConfig.from_dict({"vocab_size": VOCAB, "pos": {"max_postions": 8}})
    assert "max_positions" in str(info.value) and "name" in str(info.value)


def test_config_from_dict_accepts_known_keys() -> None:
    """from_dict with valid keys builds the config, pos included."""
    config = ModelConfig.from_dict(
        {"vocab_size": VOCAB, "d_model": 64, "n_heads": 8, "pos": {"name": "none"}}
    )
    assert (config.d_model, config.head_dim, config.pos.name, config.d_ff) == (64, 8, "none", 256)
