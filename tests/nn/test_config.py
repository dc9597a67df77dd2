"""ModelConfig's new choices: each bad value is a ValueError naming key, value and valid choices;
the config's name lists agree with the tables that resolve them."""

from __future__ import annotations

import pytest

from xfmr.nn import config as config_module
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.layers import ACTIVATIONS, NORMS
from xfmr.nn.models import MODELS
from xfmr.nn.positions import POSITIONS
from xfmr.nn.rnn import RNN_CELLS

VOCAB = 50


def _config(**overrides) -> ModelConfig:
    values = dict(vocab_size=VOCAB, n_layers=2, n_heads=4, d_model=32)
    return ModelConfig(**{**values, **overrides})


@pytest.mark.parametrize(
    ("key", "bad", "valid"),
    [
        ("arch", "encodr", ["decoder", "encoder", "encoder_decoder", "rnn"]),
        ("norm", "batchnorm", ["layernorm", "rmsnorm"]),
        ("activation", "tanh", ["relu", "gelu", "gelu_tanh", "swiglu", "geglu"]),
        ("rnn_cell", "transformer", ["gru", "lstm", "tanh"]),
        ("placement", "middle", ["pre", "post"]),
    ],
)
def test_bad_choice_names_key_value_and_choices(key: str, bad: str, valid: list[str]) -> None:
    """An unknown choice raises ValueError with `key='value'` and every valid choice."""
    with pytest.raises(ValueError) as info:
        _config(**{key: bad})
    message = str(info.value)
    assert f"{key}={bad!r}" in message
    for choice in valid:
        assert repr(choice) in message


@pytest.mark.parametrize("key", ["arch", "norm", "activation", "rnn_cell"])
def test_every_valid_choice_is_accepted(key: str) -> None:
    """Each listed choice builds a config (with positions an RNN accepts)."""
    choices = {
        "arch": config_module.ARCHS,
        "norm": config_module.NORMS,
        "activation": config_module.ACTIVATIONS,
        "rnn_cell": config_module.RNN_CELLS,
    }[key]
    for choice in choices:
        assert getattr(_config(**{key: choice}, pos=PosConfig(name="none")), key) == choice


def test_unknown_pos_name_lists_schemes() -> None:
    """pos.name is checked in the config, before any torch module is built."""
    with pytest.raises(ValueError, match="pos.name='rotaryy'") as info:
        _config(pos=PosConfig(name="rotaryy"))
    for name in POSITIONS:
        assert repr(name) in str(info.value)


@pytest.mark.parametrize("pos", ["relative", "rotary", "alibi", "learned", "sinusoidal"])
def test_rnn_rejects_positional_schemes(pos: str) -> None:
    """An RNN orders tokens by recurrence: every scheme but `none` is refused, listing `none`."""
    with pytest.raises(ValueError) as info:
        _config(arch="rnn", pos=PosConfig(name=pos))
    message = str(info.value)
    assert f"pos.name={pos!r}" in message and "arch='rnn'" in message and "['none']" in message


def test_heads_must_divide_the_width_of_a_transformer_but_not_of_an_rnn() -> None:
    """An RNN has no heads: its width is free (an LSTM matched to a transformer's size is 222
    wide), while a transformer's is split among its heads."""
    with pytest.raises(ValueError, match="d_model=222 is not divisible by n_heads=4"):
        _config(d_model=222, n_heads=4)
    assert _config(arch="rnn", d_model=222, n_heads=4, pos=PosConfig(name="none")).d_model == 222


@pytest.mark.parametrize("arch", ["decoder", "encoder", "encoder_decoder"])
@pytest.mark.parametrize("pos", sorted(POSITIONS))
def test_transformers_accept_every_scheme(arch: str, pos: str) -> None:
    """Every transformer arch takes every positional scheme."""
    assert _config(arch=arch, pos=PosConfig(name=pos, max_positions=16)).pos.name == pos


def test_rotary_needs_even_head_dim() -> None:
    """Rotary rotates channel pairs: an odd head dim is refused with the numbers that make it."""
    with pytest.raises(ValueError, match="d_model=36 / n_heads=4 = 9"):
        _config(d_model=36, n_heads=4, pos=PosConfig(name="rotary"))
    _config(d_model=36, n_heads=4, pos=PosConfig(name="learned"))  # fine without rotary


@pytest.mark.parametrize(
    ("pos", "match"),
    [
        (PosConfig(name="relative", num_buckets=2), "pos.num_buckets=2"),
        (PosConfig(name="relative", num_buckets=32, max_distance=16), "pos.max_distance=16"),
        (PosConfig(name="rotary", rotary_base=1.0), "pos.rotary_base=1.0"),
    ],
)
def test_bad_position_options(pos: PosConfig, match: str) -> None:
    """Relative bucket settings that would divide by zero, and a rotary base <= 1, are refused."""
    with pytest.raises(ValueError, match=match):
        _config(pos=pos)


def test_segments_only_on_encoder_archs() -> None:
    """type_vocab_size > 0 is refused on a decoder by the config check (it would be silently
    unused), and < 0 anywhere."""
    with pytest.raises(
        ValueError, match=r"type_vocab_size=2 applies to arch in .* not arch=decoder"
    ):
        ModelConfig.check_applies({"arch": "decoder", "type_vocab_size": 2})
    with pytest.raises(ValueError, match="type_vocab_size=-1"):
        _config(arch="encoder", type_vocab_size=-1)
    assert _config(arch="encoder", type_vocab_size=2).type_vocab_size == 2


def test_decoder_layers_default_to_encoder_layers() -> None:
    """n_decoder_layers=None resolves to n_layers; an explicit value stays; 0 is refused."""
    assert _config(arch="encoder_decoder", n_layers=3).n_decoder_layers == 3
    assert _config(arch="encoder_decoder", n_decoder_layers=5).n_decoder_layers == 5
    with pytest.raises(ValueError, match="n_decoder_layers=0"):
        _config(arch="encoder_decoder", n_decoder_layers=0)


def test_from_dict_takes_new_keys_and_round_trips() -> None:
    """Every new key passes from_dict; to_dict -> from_dict gives an equal config."""
    values = {
        "vocab_size": VOCAB,
        "arch": "encoder_decoder",
        "norm": "rmsnorm",
        "activation": "geglu",
        "attn_scale": False,
        "n_decoder_layers": 3,
        "share_embeddings": False,
        "scale_logits": True,
        "embed_norm": True,
        "type_vocab_size": 2,
        "pos": {"name": "relative", "num_buckets": 16, "max_distance": 64},
    }
    config = ModelConfig.from_dict(values)
    assert (config.pos.num_buckets, config.pos.max_distance, config.n_decoder_layers) == (16, 64, 3)
    assert ModelConfig.from_dict(config.to_dict()) == config


def test_defaults() -> None:
    """The new fields default to the GPT-style model the project started with."""
    config = ModelConfig(vocab_size=VOCAB)
    assert (config.arch, config.norm, config.activation, config.attn_scale) == (
        "decoder",
        "layernorm",
        "gelu",
        True,
    )
    assert (config.type_vocab_size, config.embed_norm, config.share_embeddings) == (0, False, True)
    assert (config.scale_logits, config.rnn_cell) == (False, "lstm")
    assert (config.pos.num_buckets, config.pos.max_distance, config.pos.rotary_base) == (
        32,
        128,
        10000.0,
    )


def test_config_names_match_the_tables_that_resolve_them() -> None:
    """Config (torch-free) lists the same names as the tables in the torch modules."""
    assert set(config_module.POS_NAMES) == set(POSITIONS)
    assert set(config_module.ARCHS) == set(MODELS)
    assert set(config_module.ACTIVATIONS) == set(ACTIVATIONS)
    assert set(config_module.NORMS) == set(NORMS)
    assert set(config_module.RNN_CELLS) == set(RNN_CELLS)


def test_config_module_imports_no_torch() -> None:
    """xfmr.nn.config stays importable without torch (the CLI checks configs before loading it)."""
    import subprocess
    import sys

    code = "import sys, xfmr.nn.config; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
