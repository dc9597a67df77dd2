"""model.vocab_multiple: the embedding and the LM head get the tokenizer's vocabulary rounded up
to a multiple of it (nanoGPT's 50,257 -> 50,304), every architecture alike; 1, the default,
builds the model it always did; a bad value is refused naming the key."""

from __future__ import annotations

import pytest
import torch

from xfmr.nn.config import ModelConfig
from xfmr.nn.heads import EncoderMaskedLM
from xfmr.nn.model_keys import differences, fine_tune_keys, resume_keys
from xfmr.nn.models import build_model

TINY = dict(n_layers=1, n_heads=2, d_model=16)


def _config(arch: str = "decoder", **overrides) -> ModelConfig:
    pos = {"name": "none"} if arch == "rnn" else {"name": "learned", "max_positions": 16}
    return ModelConfig(**{**TINY, "arch": arch, "pos": pos, **overrides})


def _rows(model: torch.nn.Module) -> dict[str, int]:
    """name -> rows of every token embedding and vocabulary projection of `model`."""
    found = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and "tok_emb" in name:
            found[name] = module.num_embeddings
        elif isinstance(module, torch.nn.Linear) and name.endswith(("lm_head", "decoder")):
            found[name] = module.out_features
    return found


def test_one_builds_the_model_it_always_did() -> None:
    without = _config(vocab_size=65)
    assert without.vocab_multiple == 1 and without.padded_vocab_size == 65
    torch.manual_seed(0)
    before = build_model(without)
    torch.manual_seed(0)
    after = build_model(_config(vocab_size=65, vocab_multiple=1))
    ours, theirs = before.state_dict(), after.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # a config saved before the key existed reads as 1
    saved = {k: v for k, v in without.to_dict().items() if k != "vocab_multiple"}
    assert ModelConfig.from_dict(saved) == without


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder", "rnn"])
@pytest.mark.parametrize("tie", [True, False])
def test_65_characters_at_64_take_128_rows(arch: str, tie: bool) -> None:
    config = _config(arch, vocab_size=65, vocab_multiple=64, tie_embeddings=tie)
    assert config.vocab_size == 65 and config.padded_vocab_size == 128
    model = build_model(config)
    rows = _rows(model)
    assert rows and set(rows.values()) == {128}, rows
    ids = torch.randint(0, 65, (2, 5))
    mask = torch.ones_like(ids)
    logits = model(ids, mask, ids, mask) if arch == "encoder_decoder" else model(ids)
    assert logits.shape == (2, 5, 128)


def test_the_bert_mlm_head_is_padded_too() -> None:
    config = _config("encoder", vocab_size=65, vocab_multiple=64, embed_norm=True)
    model = EncoderMaskedLM(config)
    assert model.mlm.bias.shape == (128,)
    assert model(torch.randint(0, 65, (1, 4))).shape == (1, 4, 128)


@pytest.mark.parametrize(
    ("vocab", "multiple", "rows"),
    [(65, 50304, 50304), (50257, 64, 50304), (128, 64, 128), (65, 1, 65), (1, 8, 8)],
)
def test_rows_are_the_next_multiple(vocab: int, multiple: int, rows: int) -> None:
    assert _config(vocab_size=vocab, vocab_multiple=multiple).padded_vocab_size == rows


def test_gpt2s_head_over_characters() -> None:
    """A benchmark's GPT-2-shaped head over 65 characters: 50,304 rows, counted on meta."""
    with torch.device("meta"):
        model = build_model(_config(vocab_size=65, vocab_multiple=50304, tie_embeddings=False))
    assert set(_rows(model).values()) == {50304}


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (0, "vocab_multiple=0 must be a positive integer"),
        (-64, "vocab_multiple=-64 must be a positive integer"),
        (2.5, "vocab_multiple=2.5 must be an integer"),
        (True, "vocab_multiple=True must be an integer"),
        ("64", "vocab_multiple='64' must be an integer"),
        (None, "vocab_multiple=None must be an integer"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(bad, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        _config(vocab_size=65, vocab_multiple=bad)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_no_rows_before_the_run_sets_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="vocab_size is not set"):
        _ = _config(vocab_multiple=64).padded_vocab_size


def test_a_fine_tune_or_resume_keeps_the_trained_rows() -> None:
    """vocab_multiple changes the tensors' shapes: init_from and resume refuse another value
    (the vocabulary itself a fine-tune may change, as before)."""
    assert "vocab_multiple" not in fine_tune_keys() | resume_keys()
    trained = _config(vocab_size=65, vocab_multiple=64)
    again = _config(vocab_size=70, vocab_multiple=1)
    assert differences(trained, again, ignore=fine_tune_keys()) == [("vocab_multiple", 64, 1)]
    assert (
        differences(trained, _config(vocab_size=70, vocab_multiple=64), ignore=fine_tune_keys())
        == []
    )


def test_the_run_config_records_it() -> None:
    section = ModelConfig.from_section({**TINY, "vocab_multiple": 64})
    assert section.settings()["vocab_multiple"] == 64
    assert section.with_vocab(65).padded_vocab_size == 128
