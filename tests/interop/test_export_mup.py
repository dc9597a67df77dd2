"""A µP model (model.parametrization=mup) exported to Hugging Face: its multipliers folded into
the weights (`xfmr.nn.mup.folded`: the readout's base/width into the LM or task head, untied from
the embedding; the attention's 1/d_head against the class's 1/sqrt(d_head) into the query
projection, or the query norm's gain), the transformers class built offline computes xfmr's
logits; where no class represents the folded model (BERT's masked-LM heads, tied to the
embedding), export is refused in one line naming the key. Run with `-s` to see the
differences."""

from __future__ import annotations

import pytest
import torch

from helpers.models import randomize

transformers = pytest.importorskip("transformers")

from xfmr.interop.hf_export import hf_family, to_hf  # noqa: E402
from xfmr.nn.config import ModelConfig, PosConfig  # noqa: E402
from xfmr.nn.heads import (  # noqa: E402
    EncoderMaskedLM,
    EncoderPretraining,
    SequenceClassification,
    SpanExtraction,
    TokenClassification,
)
from xfmr.nn.models import build_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = 1e-5
# d_model 48 at base 16: m = 3, so no multiplier is a power of two that rounds exactly.
MUP = dict(vocab_size=64, n_layers=2, n_heads=4, d_model=48, parametrization="mup",
           mup_base_width=16)  # fmt: skip
LLAMA = dict(pos=PosConfig(name="rotary"), norm="rmsnorm", activation="swiglu", bias=False)
BERT = dict(arch="encoder", placement="post", embed_norm=True, type_vocab_size=2,
            pos=PosConfig(name="learned", max_positions=32))  # fmt: skip
T5 = dict(arch="encoder_decoder", norm="rmsnorm", bias=False, attn_scale=False,
          activation="relu", pos=PosConfig(name="relative", num_buckets=8, max_distance=16))  # fmt: skip
CASES = {
    "gpt2 tied": ("GPT2LMHeadModel", dict(pos=PosConfig(name="learned", max_positions=32))),
    "llama": ("LlamaForCausalLM", dict(**LLAMA, tie_embeddings=False)),
    "llama tied": ("LlamaForCausalLM", LLAMA),
    "qwen3": ("Qwen3ForCausalLM", dict(**LLAMA, qk_norm="rmsnorm")),
    "t5 v1": ("T5ForConditionalGeneration", dict(**T5, scale_logits=True)),
    "t5 v1.1": ("T5ForConditionalGeneration", dict(**T5, tie_embeddings=False)),
    "bert classification": ("BertForSequenceClassification", BERT),
    "bert tagging": ("BertForTokenClassification", BERT),
    "bert qa": ("BertForQuestionAnswering", BERT),
}
HEADS = {
    "bert classification": lambda c: SequenceClassification(c, n_classes=3),
    "bert tagging": lambda c: TokenClassification(c, n_labels=5),
    "bert qa": SpanExtraction,
}


def _logits(model, hf_model, case: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    if case.startswith("t5"):
        return model(ids, None, ids[:, :7]), hf_model(
            input_ids=ids, decoder_input_ids=ids[:, :7]
        ).logits
    theirs = hf_model(ids)
    if case == "bert qa":
        return model(ids), torch.stack([theirs.start_logits, theirs.end_logits], -1)
    return model(ids), theirs.logits


@pytest.mark.parametrize("case", sorted(CASES))
@torch.no_grad()
def test_a_mup_model_exports_with_its_multipliers_folded(case: str) -> None:
    hf_class, settings = CASES[case]
    config = ModelConfig(**{**MUP, **settings})
    model = randomize(HEADS.get(case, build_model)(config), std=0.2, seed=3)
    family = hf_family(model)
    assert family.hf_class == hf_class
    hf_model = to_hf(model, family).eval()
    ours, theirs = _logits(model, hf_model, case)
    diff = (ours - theirs).abs().max().item()
    print(f"\n[export mup] {case} ({hf_class}): max |xfmr - HF| = {diff:.2e}")
    assert diff < TOLERANCE
    if hasattr(model, "lm_head"):  # its head holds the multiplier: never the embedding
        head, embedding = hf_model.get_output_embeddings(), hf_model.get_input_embeddings()
        assert head.weight.data_ptr() != embedding.weight.data_ptr()


@pytest.mark.parametrize("head", [EncoderMaskedLM, EncoderPretraining])
def test_bert_s_tied_masked_lm_head_is_refused_naming_the_key(head) -> None:
    model = head(ModelConfig(**{**MUP, **BERT}))
    with pytest.raises(ValueError) as refused:
        hf_family(model)
    message = str(refused.value)
    assert message.startswith("model.parametrization=mup exports as sp with its multipliers")
    assert "tie_embeddings" in message and "\n" not in message
