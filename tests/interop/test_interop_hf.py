"""Parity with Hugging Face transformers: GPT-2, BERT and T5 (v1 and v1.1) built offline from small
random configs, their weights copied into xfmr by `xfmr.interop.hf`, logits compared at every
unpadded position. Nothing is downloaded.

Every parameter is redrawn (norm gains and biases too, which HF initialises to ones and zeros), so
a weight mapped to the wrong place changes the logits. Run with `-s` to see the measured
differences.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from helpers.models import randomize

transformers = pytest.importorskip("transformers")

from xfmr.interop import hf as interop  # noqa: E402
from xfmr.interop import hf_families  # noqa: E402
from xfmr.nn.encoder import EncoderLM  # noqa: E402
from xfmr.nn.encoder_decoder import EncoderDecoder  # noqa: E402
from xfmr.nn.heads import EncoderPretraining  # noqa: E402
from xfmr.nn.models import CausalLM  # noqa: E402
from xfmr.nn.positions import relative_position_bucket  # noqa: E402

VOCAB, D, HEADS, LAYERS = 100, 32, 4, 2
LENGTHS = [12, 9, 5]  # one full row and two padded ones, batch 3
TARGET_LENGTHS = [7, 7, 4]
TOLERANCE = 1e-4
STD = 0.2  # of the random weights other than norm gains

pytestmark = pytest.mark.usefixtures("one_thread")


def _padded(lengths: list[int], *, seed: int, side: str = "right") -> tuple[torch.Tensor, ...]:
    """Random ids (B, T) with random pad ids, and the (B, T) attention mask, 1 = real token."""
    generator = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(0, VOCAB, (len(lengths), T), generator=generator)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return ids, mask if side == "right" else mask.flip(-1)


def _max_diff(ours: torch.Tensor, theirs: torch.Tensor, keep: torch.Tensor | None = None) -> float:
    """max |ours - theirs| over the positions where `keep` (B, T) is 1 (all when None)."""
    diff = (ours - theirs).abs()
    return (diff if keep is None else diff[keep.bool()]).max().item()


def _report(name: str, diff: float, reference: torch.Tensor) -> None:
    print(
        f"\n[parity] {name}: max |xfmr - HF| = {diff:.2e} (max |HF logit| {reference.abs().max():.1f})"
    )


# --- Hugging Face models ---------------------------------------------------------------------


def _gpt2(**overrides) -> nn.Module:
    config = transformers.GPT2Config(
        **{
            "vocab_size": VOCAB,
            "n_positions": 64,
            "n_embd": D,
            "n_layer": LAYERS,
            "n_head": HEADS,
            "bos_token_id": 0,
            "eos_token_id": 0,
            "attn_implementation": "eager",
            **overrides,
        }
    )
    return randomize(transformers.GPT2LMHeadModel(config), std=STD)


def _bert(**overrides) -> nn.Module:
    config = transformers.BertConfig(
        **{
            "vocab_size": VOCAB,
            "hidden_size": D,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "intermediate_size": 2 * D,
            "max_position_embeddings": 64,
            "attn_implementation": "eager",
            **overrides,
        }
    )
    return randomize(transformers.BertForPreTraining(config), std=STD)


# T5 v1: ReLU FFN, LM head tied to the shared embedding, decoder output * d_model**-0.5.
# T5 v1.1: gated-GELU (tanh) FFN, its own LM head, no output scaling.
T5_VERSIONS = {
    "v1": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def _t5(version: str, **overrides) -> nn.Module:
    config = transformers.T5Config(
        **{
            "vocab_size": VOCAB,
            "d_model": D,
            "d_kv": D // HEADS,
            "d_ff": 2 * D,
            "num_layers": LAYERS,
            "num_decoder_layers": LAYERS + 1,  # unequal stacks, so a swapped count shows
            "num_heads": HEADS,
            "relative_attention_num_buckets": 8,  # few buckets: short inputs reach the log range
            "relative_attention_max_distance": 16,
            "attn_implementation": "eager",
            **T5_VERSIONS[version],
            **overrides,
        }
    )
    model = transformers.T5ForConditionalGeneration(config)
    if version == "v1.1":
        # transformers 5 builds T5 with lm_head tied to `shared` whatever the config says (it
        # unties only when a checkpoint holds two different tensors): give it its own, as the
        # v1.1 checkpoints have.
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    return randomize(model, std=STD)


def _t5_inputs() -> dict[str, torch.Tensor]:
    input_ids, attention_mask = _padded(LENGTHS, seed=1)
    decoder_input_ids, decoder_attention_mask = _padded(TARGET_LENGTHS, seed=2)
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=decoder_input_ids,
        decoder_attention_mask=decoder_attention_mask,
    )


# --- parity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
@torch.no_grad()
def test_gpt2_logits_match_with_padding(side: str) -> None:
    """GPT2LMHeadModel: Conv1D weights transposed, gelu_new = gelu_tanh, tied LM head."""
    hf_model = _gpt2()
    model = interop.from_hf(hf_model)
    assert isinstance(model, CausalLM) and not model.training
    assert model.lm_head.weight is model.backbone.tok_emb.weight
    ids, mask = _padded(LENGTHS, seed=1, side=side)
    theirs = hf_model(ids, attention_mask=mask).logits  # (B, T, V)
    diff = _max_diff(model(ids, mask), theirs, mask)
    _report(f"gpt2 ({side} padding)", diff, theirs)
    assert diff < TOLERANCE


@torch.no_grad()
def test_bert_mlm_and_nsp_logits_match_with_segments_and_padding() -> None:
    """BertForPreTraining: post-LN, exact GELU, segment embeddings, embedding LayerNorm (eps
    1e-12), MLM transform with a tied decoder and its own bias, pooler + NSP."""
    hf_model = _bert()
    model = interop.from_hf(hf_model)
    assert isinstance(model, EncoderPretraining)
    assert model.mlm.decoder.weight is model.backbone.tok_emb.weight
    ids, mask = _padded(LENGTHS, seed=1)
    segments = (torch.arange(ids.size(1)) >= 4).long().expand_as(ids)  # (B, T): A A A A B B ...
    theirs = hf_model(ids, attention_mask=mask, token_type_ids=segments)
    mlm_logits, nsp_logits = model(ids, mask, segments)
    mlm_diff = _max_diff(mlm_logits, theirs.prediction_logits, mask)
    nsp_diff = _max_diff(nsp_logits, theirs.seq_relationship_logits)
    _report("bert MLM", mlm_diff, theirs.prediction_logits)
    _report("bert NSP", nsp_diff, theirs.seq_relationship_logits)
    assert mlm_diff < TOLERANCE and nsp_diff < TOLERANCE


@pytest.mark.parametrize("version", sorted(T5_VERSIONS))
@torch.no_grad()
def test_t5_logits_match_with_padding(version: str) -> None:
    """T5ForConditionalGeneration: RMSNorm, no biases, no 1/sqrt(d) scaling, one relative bias per
    stack, none on cross-attention; v1 ties and scales the output, v1.1 does neither."""
    hf_model = _t5(version)
    model = interop.from_hf(hf_model)
    assert isinstance(model, EncoderDecoder)
    tied = model.lm_head.weight is model.decoder.tok_emb.weight
    assert tied == (version == "v1") and (model.logit_scale is not None) == (version == "v1")
    inputs = _t5_inputs()
    theirs = hf_model(**inputs).logits  # (B, T, V)
    ours = model(*inputs.values())
    diff = _max_diff(ours, theirs, inputs["decoder_attention_mask"])
    _report(f"t5 {version}", diff, theirs)
    assert diff < TOLERANCE


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16), (16, 100)])
def test_relative_position_bucket_matches_t5(
    bidirectional: bool, num_buckets: int, max_distance: int
) -> None:
    """Every offset from -300 to 300 lands in the bucket T5Attention gives it."""
    offsets = torch.arange(-300, 301)[None, :]  # (1, 601), key - query
    T5Attention = transformers.models.t5.modeling_t5.T5Attention
    theirs = T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    ours = relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs)
    # Every bucket is reached, but bidirectionally the first "after" bucket (distance 0) is not.
    assert len(ours.unique()) == num_buckets - bidirectional


# --- loading from disk -----------------------------------------------------------------------

FAMILIES = {"gpt2": _gpt2, "bert": _bert, "t5 v1.1": lambda: _t5("v1.1")}


def _logits(model: nn.Module, family: str) -> torch.Tensor:
    """The model's logits on a fixed padded batch: xfmr and HF models alike."""
    ids, mask = _padded(LENGTHS, seed=1)
    is_hf = isinstance(model, transformers.PreTrainedModel)
    if family == "t5 v1.1":
        inputs = _t5_inputs()
        return model(**inputs).logits if is_hf else model(*inputs.values())
    if family == "bert":
        return model(ids, attention_mask=mask).prediction_logits if is_hf else model(ids, mask)[0]
    return model(ids, attention_mask=mask).logits if is_hf else model(ids, mask)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@torch.no_grad()
def test_load_pretrained_and_load_into_round_trip(family: str, tmp_path) -> None:
    """save_pretrained -> load_pretrained gives HF's logits; so does load_into a fresh model."""
    hf_model = FAMILIES[family]()
    hf_model.save_pretrained(tmp_path)
    expected = _logits(hf_model, family)
    loaded = interop.load_pretrained(tmp_path).eval()
    fresh = type(loaded)(interop.config_from_hf(hf_model.config)).eval()
    assert not torch.allclose(_logits(fresh, family), expected, atol=1e-2)
    interop.load_into(fresh, tmp_path)
    for model in (loaded, fresh):
        assert _max_diff(_logits(model, family), expected) < TOLERANCE
    if family == "t5 v1.1":  # the untied head and the missing output scale survive the round trip
        assert loaded.lm_head.weight is not loaded.decoder.tok_emb.weight
        assert loaded.logit_scale is None


def test_load_into_refuses_a_mismatched_config(tmp_path) -> None:
    hf_model = _gpt2()
    hf_model.save_pretrained(tmp_path)
    config = dataclasses.replace(interop.config_from_hf(hf_model.config), n_layers=3, d_ff=64)
    with pytest.raises(
        ValueError, match=r"n_layers=3 \(checkpoint: 2\).*d_ff=64 \(checkpoint: 128\)"
    ):
        interop.load_into(CausalLM(config), tmp_path)


def test_load_into_refuses_the_wrong_model_class(tmp_path) -> None:
    """A BERT checkpoint's MLM transform and pooler have no place in an EncoderLM."""
    hf_model = _bert()
    hf_model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="loads into .*EncoderPretraining.*, not EncoderLM"):
        interop.load_into(EncoderLM(interop.config_from_hf(hf_model.config)), tmp_path)


def test_load_pretrained_refuses_a_checkpoint_missing_head_weights(tmp_path) -> None:
    """A BertModel checkpoint lacks BertForPreTraining's heads; HF would draw them at random."""
    hf_model = _bert()
    hf_model.bert.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="lacks .*cls.seq_relationship.weight"):
        interop.load_pretrained(tmp_path)


def test_load_pretrained_needs_a_checkpoint_directory(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no config.json"):
        interop.load_pretrained(tmp_path)


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (
            lambda: _gpt2(scale_attn_by_inverse_layer_idx=True).config,
            "scale_attn_by_inverse_layer_idx=True",
        ),
        (lambda: _gpt2(add_cross_attention=True).config, "add_cross_attention=True"),
        (lambda: _gpt2(activation_function="silu").config, "activation_function='silu'"),
        (lambda: _gpt2(embd_pdrop=0.0).config, "embd_pdrop=0.0"),
        (
            lambda: transformers.BertConfig(position_embedding_type="relative_key"),
            "position_embedding_type='relative_key'",
        ),
        (lambda: transformers.BertConfig(is_decoder=True), "is_decoder=True"),
        (lambda: transformers.BertConfig(tie_word_embeddings=False), "tie_word_embeddings=False"),
        (lambda: transformers.T5Config(d_model=32, d_kv=4, num_heads=4), "d_kv=4 \\* num_heads=4"),
        (
            lambda: transformers.T5Config(feed_forward_proj="gated-relu"),
            "feed_forward_proj='gated-relu'",
        ),
        (lambda: transformers.LlamaConfig(head_dim=64), "head_dim=64"),
        (lambda: transformers.BartConfig(), "model_type='bart'"),
    ],
)
def test_config_from_hf_refuses_unsupported_settings(build, field: str) -> None:
    """The error names the HF field and its value."""
    with pytest.raises(ValueError, match=field):
        interop.config_from_hf(build())


def test_from_hf_refuses_other_model_classes() -> None:
    hf_model = transformers.GPT2Model(_gpt2().config)
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*got GPT2Model"):
        interop.from_hf(hf_model)


def test_from_hf_lists_an_hf_weight_it_did_not_map() -> None:
    hf_model = _gpt2()
    hf_model.transformer.register_parameter("extra", nn.Parameter(torch.zeros(3)))
    with pytest.raises(
        ValueError, match=r"GPT2LMHeadModel weights mapped to nothing: \['transformer.extra'\]"
    ):
        interop.from_hf(hf_model)


def test_from_hf_lists_an_xfmr_weight_left_without_a_value(monkeypatch) -> None:
    family = hf_families.FAMILIES["GPT2LMHeadModel"]

    def without_final_norm(config):
        table = family.table(config)
        table.links = [link for link in table.links if link.ours != "backbone.final_norm.weight"]
        return table

    monkeypatch.setitem(
        hf_families.FAMILIES,
        "GPT2LMHeadModel",
        dataclasses.replace(family, table=without_final_norm),
    )
    with pytest.raises(ValueError) as info:
        interop.from_hf(_gpt2())
    message = str(info.value)
    assert "CausalLM weights given no value: ['backbone.final_norm.weight']" in message
    assert "mapped to nothing: ['transformer.ln_f.weight']" in message


def test_from_hf_refuses_a_tie_the_checkpoint_does_not_have() -> None:
    """A v1 config ties xfmr's LM head to the embedding; a checkpoint with its own head differs."""
    hf_model = _t5("v1")
    hf_model.lm_head.weight = nn.Parameter(torch.randn(VOCAB, D))
    with pytest.raises(ValueError, match=r"'lm_head.weight'\] are one tensor in EncoderDecoder"):
        interop.from_hf(hf_model)


def test_interop_module_does_not_import_transformers() -> None:
    """xfmr.nn never imports transformers, and xfmr.interop.hf only inside its loaders."""
    import subprocess
    import sys

    code = "import sys, xfmr.nn.heads, xfmr.interop.hf; print('transformers' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
