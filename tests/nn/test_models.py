"""CausalLM from a ModelConfig (shapes, causality, padding, tying, parameter count, config), and
every architecture x positional scheme: causality, padding, equivariance, offsets,
cross-attention reach, sharing and tying, parameter counts, and that each arch trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.encoder import Encoder, EncoderLM
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.models import MODELS, CausalLM, build_model
from xfmr.nn.positions import POSITIONS
from xfmr.nn.rnn import RNNLM

VOCAB, T, S = 50, 10, 8
ALL_POS = sorted(POSITIONS)
RELATIVE_POS = ["relative", "rotary", "alibi"]  # schemes that see only offsets

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(arch: str = "decoder", pos: str = "learned", **overrides) -> ModelConfig:
    values = dict(
        vocab_size=VOCAB,
        arch=arch,
        n_layers=2,
        n_heads=4,
        d_model=32,
        pos=PosConfig(name=pos, max_positions=64),
    )
    return ModelConfig(**{**values, **overrides})


def _build(arch: str = "decoder", pos: str = "learned", **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(_config(arch, pos, **overrides)).eval()


def _encoder(pos: str, **overrides) -> Encoder:
    """The encoder stack of an EncoderLM, so its weights are initialised."""
    return _build("encoder", pos, **overrides).backbone


def _ids(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _change_after(ids: torch.Tensor, t: int) -> torch.Tensor:
    changed = ids.clone()
    changed[:, t + 1 :] = (ids[:, t + 1 :] + 1) % VOCAB
    return changed


def _right_mask(lengths: list[int], length: int) -> torch.Tensor:
    return (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, L)


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


def _encoder_lm() -> torch.nn.Module:
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


# --- CausalLM: shapes, causality, padding, tying, parameter count, config ---------------------


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
    model = _model() if arch == "decoder" else _encoder_lm()
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


# --- causality --------------------------------------------------------------------------------

T5_LIKE = dict(norm="rmsnorm", activation="geglu", attn_scale=False, bias=False)


@pytest.mark.parametrize("variant", [{}, {"placement": "post"}, T5_LIKE], ids=["pre", "post", "t5"])
@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_decoder_is_causal(pos: str, variant: dict) -> None:
    """Decoder-only: logits up to t ignore tokens after t; later logits do change."""
    model, ids, t = _build("decoder", pos, **variant), _ids(), 4
    logits, changed = model(ids), model(_change_after(ids, t))
    torch.testing.assert_close(changed[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=0)
    assert not torch.allclose(changed[:, t + 1 :], logits[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("variant", [{}, {"placement": "post"}, T5_LIKE], ids=["pre", "post", "t5"])
@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_decoder_decoder_side_is_causal(pos: str, variant: dict) -> None:
    """Encoder-decoder: target logits up to t ignore target tokens after t."""
    model, source, target, t = _build("encoder_decoder", pos, **variant), _ids(), _ids(seed=2), 3
    logits = model(source, None, target)
    changed = model(source, None, _change_after(target, t))
    torch.testing.assert_close(changed[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=0)
    assert not torch.allclose(changed[:, t + 1 :], logits[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("cell", ["gru", "lstm", "tanh"])
@torch.no_grad()
def test_rnn_is_causal(cell: str) -> None:
    """RNN LM: logits up to t ignore tokens after t."""
    model, ids, t = _build("rnn", "none", rnn_cell=cell), _ids(), 4
    logits, changed = model(ids), model(_change_after(ids, t))
    torch.testing.assert_close(changed[:, : t + 1], logits[:, : t + 1], atol=1e-5, rtol=0)
    assert not torch.allclose(changed[:, t + 1 :], logits[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_sees_the_future(pos: str) -> None:
    """The encoder is bidirectional: changing later tokens changes earlier outputs."""
    encoder, ids, t = _encoder(pos), _ids(), 4
    assert not torch.allclose(encoder(_change_after(ids, t))[:, : t + 1], encoder(ids)[:, : t + 1])


# --- padding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_right_padding_matches_unpadded(pos: str) -> None:
    """Right padding: real positions equal each sequence run alone, whatever the pads hold."""
    encoder, lengths = _encoder(pos), [6, T]
    ids, garbage = _ids(), _ids(seed=9)
    ids[0, lengths[0] :] = garbage[0, lengths[0] :]
    out = encoder(ids, _right_mask(lengths, T))
    for b, length in enumerate(lengths):
        alone = encoder(ids[b : b + 1, :length])  # (1, length, C)
        torch.testing.assert_close(out[b, :length], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", ["none", *RELATIVE_POS])
@torch.no_grad()
def test_encoder_left_padding_matches_unpadded(pos: str) -> None:
    """Left padding: real positions equal the unpadded run (for schemes that see offsets only;
    absolute schemes would see the real tokens at shifted positions)."""
    encoder, pads, ids = _encoder(pos), 3, _ids(1)
    attention_mask = torch.ones(1, T, dtype=torch.long)
    attention_mask[0, :pads] = 0
    out = encoder(ids, attention_mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, pads:], encoder(ids[:, pads:]), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(encoder(ids)[:, pads:], encoder(ids[:, pads:]), atol=1e-3)


@pytest.mark.parametrize("pos", ["none", *RELATIVE_POS])
@torch.no_grad()
def test_decoder_left_padding_with_position_bias(pos: str) -> None:
    """Decoder-only with left padding: causal mask, padding mask and bias fold together; real
    positions equal the unpadded run and padded rows stay finite."""
    model, pads, ids = _build("decoder", pos), 4, _ids(1)
    attention_mask = torch.ones(1, T, dtype=torch.long)
    attention_mask[0, :pads] = 0
    out = model(ids, attention_mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, pads:], model(ids[:, pads:]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_decoder_source_padding(pos: str) -> None:
    """Padded source tokens do not reach the decoder: logits equal those for the source alone."""
    model, lengths = _build("encoder_decoder", pos), [5, S]
    source, target = _ids(length=S), _ids(seed=2, length=6)
    source[0, lengths[0] :] = _ids(seed=9, length=S)[0, lengths[0] :]
    logits = model(source, _right_mask(lengths, S), target)
    for b, length in enumerate(lengths):
        alone = model(source[b : b + 1, :length], None, target[b : b + 1])
        torch.testing.assert_close(logits[b], alone[0], atol=1e-5, rtol=1e-5)
    unmasked = model(source[:1], None, target[:1])  # the pads, unmasked, do reach it
    assert not torch.allclose(unmasked[0], logits[0], atol=1e-4)


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_decoder_target_padding(pos: str) -> None:
    """Right-padded targets: real target positions equal each target decoded alone."""
    model, lengths = _build("encoder_decoder", pos), [4, 7]
    source, target = _ids(length=S), _ids(seed=2, length=7)
    logits = model(source, None, target, _right_mask(lengths, 7))
    for b, length in enumerate(lengths):
        alone = model(source[b : b + 1], None, target[b : b + 1, :length])
        torch.testing.assert_close(logits[b, :length], alone[0], atol=1e-5, rtol=1e-5)


# --- equivariance and offsets -----------------------------------------------------------------


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_permutation_equivariant_only_without_positions(pos: str) -> None:
    """Encoder(P x) = P Encoder(x) with pos=none; every positional scheme breaks it."""
    encoder, ids = _encoder(pos), _ids()
    perm = torch.randperm(T, generator=torch.Generator().manual_seed(5))
    permuted, expected = encoder(ids[:, perm]), encoder(ids)[:, perm]
    if pos == "none":
        torch.testing.assert_close(permuted, expected, atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(permuted, expected, atol=1e-3)


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_shifting_every_position_changes_only_absolute_schemes(arch: str, pos: str) -> None:
    """Placing the sequence at positions k .. k+T-1 leaves outputs unchanged for relative, rotary
    and alibi (attention sees offsets only) and changes them for sinusoidal and learned."""
    model = _build(arch, pos)
    stack, ids = model.backbone, _ids()
    shifted, plain = stack(ids, offset=17), stack(ids)
    if pos in ("sinusoidal", "learned"):
        assert not torch.allclose(shifted, plain, atol=1e-3)
    else:
        torch.testing.assert_close(shifted, plain, atol=1e-5, rtol=1e-5)


# --- cross-attention --------------------------------------------------------------------------


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_cross_attention_sees_every_source_token(pos: str) -> None:
    """Changing any one source token changes the decoder's logits at every target position."""
    model, source, target = _build("encoder_decoder", pos), _ids(1, S), _ids(1, 6, seed=2)
    logits = model(source, None, target)
    for j in range(S):
        changed = source.clone()
        changed[0, j] = (source[0, j] + 1) % VOCAB
        moved = (model(changed, None, target) - logits).abs().amax(dim=-1)  # (1, T_tgt)
        assert (moved > 1e-5).all(), f"source token {j} does not reach every target position"


@torch.no_grad()
def test_encode_decode_equal_forward() -> None:
    """forward = decode(encode(...)); encoder states are (B, S, C) and logits (B, T, V)."""
    model = _build("encoder_decoder", "relative")
    source, target, mask = _ids(length=S), _ids(seed=2, length=6), _right_mask([5, S], S)
    states = model.encode(source, mask)
    assert states.shape == (2, S, 32)
    logits = model.decode(target, states, mask)
    assert logits.shape == (2, 6, VOCAB)
    torch.testing.assert_close(logits, model(source, mask, target))


def test_decoder_stack_requires_encoder_states() -> None:
    model = _build("encoder_decoder", "none")
    with pytest.raises(ValueError, match="context"):
        model.decoder(_ids())


# --- positions per stack ----------------------------------------------------------------------


@pytest.mark.parametrize("pos", ["relative", "alibi", "rotary"])
@torch.no_grad()
def test_positions_are_computed_once_per_stack(pos: str) -> None:
    """A bias or rotation is computed once per stack per forward, not once per layer."""
    model = _build("encoder_decoder", pos, n_layers=3)
    calls = {"encoder": 0, "decoder": 0}
    for name in calls:
        stack = getattr(model, name)
        stack.pos.register_forward_hook(
            lambda *_, name=name: calls.__setitem__(name, calls[name] + 1)
        )
    model(_ids(length=S), None, _ids(seed=2))
    assert calls == {"encoder": 1, "decoder": 1}


def test_relative_bias_is_bidirectional_in_encoder_and_causal_in_decoder() -> None:
    """T5: each stack has its own bias table; the encoder's sees both directions."""
    model = _build("encoder_decoder", "relative")
    assert model.encoder.pos.bidirectional and not model.decoder.pos.bidirectional
    assert model.encoder.pos.embedding is not model.decoder.pos.embedding
    assert not any("pos" in name for name, _ in model.decoder.blocks[0].cross_attn.named_modules())


# --- sharing, tying, scaling ------------------------------------------------------------------


def test_shared_and_tied_embeddings_are_one_tensor() -> None:
    """share_embeddings + tie_embeddings: source, target and output use one matrix."""
    model = _build("encoder_decoder", "sinusoidal")
    weight = model.encoder.tok_emb.weight
    assert model.decoder.tok_emb.weight is weight and model.lm_head.weight is weight


def test_separate_embeddings_add_one_matrix() -> None:
    """share_embeddings=False gives the decoder its own embedding (tied to the output)."""
    shared = _build("encoder_decoder", "sinusoidal")
    separate = _build("encoder_decoder", "sinusoidal", share_embeddings=False)
    assert separate.decoder.tok_emb.weight is not separate.encoder.tok_emb.weight
    assert separate.lm_head.weight is separate.decoder.tok_emb.weight
    assert separate.num_parameters() == shared.num_parameters() + VOCAB * 32
    untied = _build("encoder_decoder", "sinusoidal", tie_embeddings=False)
    assert untied.lm_head.weight is not untied.decoder.tok_emb.weight
    assert untied.num_parameters() == shared.num_parameters() + VOCAB * 32


@pytest.mark.parametrize("arch", ["encoder", "rnn"])
def test_lm_heads_are_tied(arch: str) -> None:
    model = _build(arch, "none")
    embedding = model.tok_emb if arch == "rnn" else model.backbone.tok_emb
    assert model.lm_head.weight is embedding.weight
    assert _build(arch, "none", tie_embeddings=False).lm_head.weight is not embedding.weight


@torch.no_grad()
def test_scale_logits_multiplies_decoder_output() -> None:
    """T5: logits = lm_head(decoder_output * d_model**-0.5)."""
    model = _build("encoder_decoder", "relative", scale_logits=True)
    source, target = _ids(length=S), _ids(seed=2)
    hidden = model.decoder(target, context=model.encode(source))
    torch.testing.assert_close(model(source, None, target), model.lm_head(hidden * 32**-0.5))
    model.logit_scale = None
    assert not torch.allclose(model(source, None, target), model.lm_head(hidden * 32**-0.5))


def test_attn_scale_false_reaches_every_attention() -> None:
    model = _build("encoder_decoder", "relative", attn_scale=False)
    scales = {m.scale for name, m in model.named_modules() if name.endswith("attn")}
    assert scales == {1.0}
    assert {m.scale for name, m in _build().named_modules() if name.endswith("attn")} == {None}


# --- encoder embeddings -----------------------------------------------------------------------


@torch.no_grad()
def test_segment_embeddings() -> None:
    """token_type_ids change the output; omitting them equals passing all zeros (BERT)."""
    encoder, ids = _encoder("learned", type_vocab_size=2), _ids()
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    assert encoder.type_emb.weight.shape == (2, 32)
    torch.testing.assert_close(encoder(ids), encoder(ids, None, torch.zeros_like(ids)))
    assert not torch.allclose(encoder(ids, None, types), encoder(ids), atol=1e-4)


@torch.no_grad()
def test_embedding_norm() -> None:
    """embed_norm normalises the summed embeddings (BERT); off by default."""
    encoder = _encoder("learned", embed_norm=True, type_vocab_size=2, norm_eps=1e-12)  # BERT eps
    ids = _ids()
    embedded = encoder.embed(ids)  # (B, T, C)
    torch.testing.assert_close(embedded.mean(-1), torch.zeros(2, T), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        embedded.var(-1, unbiased=False), torch.ones(2, T), atol=1e-3, rtol=0
    )
    assert not torch.allclose(_encoder("learned").embed(ids).var(-1), torch.ones(2, T), atol=0.5)


# --- RNN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "cls"), [("gru", torch.nn.GRU), ("lstm", torch.nn.LSTM), ("tanh", torch.nn.RNN)]
)
def test_rnn_cells(cell: str, cls: type) -> None:
    """rnn_cell picks the torch layer; hidden = d_model, n_layers deep, dropout between layers."""
    model = _build("rnn", "none", rnn_cell=cell, n_layers=3, dropout=0.1)
    assert type(model.rnn) is cls
    assert (model.rnn.hidden_size, model.rnn.num_layers, model.rnn.dropout) == (32, 3, 0.1)
    if cell == "tanh":
        assert model.rnn.nonlinearity == "tanh"
    assert model(_ids()).shape == (2, T, VOCAB)


# --- building, counting, training -------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "cls"),
    [
        ("decoder", CausalLM),
        ("encoder", EncoderLM),
        ("encoder_decoder", EncoderDecoder),
        ("rnn", RNNLM),
    ],
)
def test_build_model_dispatches_on_arch(arch: str, cls: type) -> None:
    pos = "none" if arch == "rnn" else "learned"
    assert MODELS[arch] is cls and type(_build(arch, pos)) is cls


def _vaswani_base() -> ModelConfig:
    return ModelConfig(
        vocab_size=37000,
        arch="encoder_decoder",
        n_layers=6,
        n_decoder_layers=6,
        d_model=512,
        d_ff=2048,
        n_heads=8,
        share_embeddings=True,
        tie_embeddings=True,
        placement="post",
        activation="relu",
        bias=True,
        pos=PosConfig(name="sinusoidal"),
    )


def test_transformer_base_has_about_65m_parameters() -> None:
    """Vaswani et al. 2017 base (Table 3: 65M): the exact hand count, inside 63M-65M."""
    vocab, d, d_ff, layers = 37000, 512, 2048, 6
    attention = 4 * d * d + 4 * d  # q, k, v, out matrices and biases (fused or not)
    ffn = 2 * d * d_ff + d_ff + d  # up and down with biases
    norm = 2 * d  # LayerNorm gain and bias
    encoder_layer = attention + ffn + 2 * norm  # 3_152_384
    decoder_layer = 2 * attention + ffn + 3 * norm  # self + cross attention: 4_204_032
    embeddings = vocab * d  # one matrix: source, target and output projection (tied, shared)
    expected = embeddings + layers * (encoder_layer + decoder_layer)  # post-LN: no final norms
    assert (encoder_layer, decoder_layer, expected) == (3_152_384, 4_204_032, 63_082_496)
    with torch.device("meta"):  # shapes without storage: no 250 MB, no random init
        count = EncoderDecoder(_vaswani_base()).num_parameters()
    print(f"Transformer base: {count:,} parameters (paper: ~65M)")
    assert count == expected
    assert 63_000_000 <= count <= 65_000_000


def _train(model: torch.nn.Module, step, steps: int = 30) -> tuple[float, float]:
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    losses = []
    for _ in range(steps):
        loss = step(model)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


@pytest.mark.parametrize(
    ("arch", "pos"),
    [
        ("decoder", "rotary"),
        ("encoder", "learned"),
        ("encoder_decoder", "relative"),
        ("rnn", "none"),
    ],
)
def test_each_arch_trains_end_to_end(arch: str, pos: str) -> None:
    """A few Adam steps on one fixed batch (copy the input; for the decoder and RNN, the next
    token) cut the loss in half: gradients reach every part that matters."""
    model = _build(arch, pos)
    ids = _ids(4, 8)

    def step(m):
        if arch == "encoder_decoder":
            logits = m(ids, None, ids[:, :-1])
            return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        if arch == "encoder":
            return F.cross_entropy(m(ids).flatten(0, 1), ids.flatten())
        return F.cross_entropy(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())

    first, last = _train(model, step)
    assert last < 0.5 * first, (first, last)


def test_embed_scale_multiplies_token_embeddings_by_sqrt_d_model() -> None:
    """Vaswani et al. 2017, sec. 3.4: embeddings are multiplied by sqrt(d_model)."""
    from xfmr.nn.config import ModelConfig
    from xfmr.nn.models import DecoderOnly

    ids = torch.tensor([[1, 2, 3]])
    plain = DecoderOnly(ModelConfig(vocab_size=10, d_model=16, n_heads=2, pos={"name": "none"}))
    scaled = DecoderOnly(
        ModelConfig(vocab_size=10, d_model=16, n_heads=2, pos={"name": "none"}, embed_scale=True)
    )
    scaled.load_state_dict(plain.state_dict())
    assert torch.allclose(scaled.embed(ids), plain.embed(ids) * 4.0)
