"""A model key is declared once, on ModelConfig's field; the tables that remain elsewhere derive
from the fields or are held to them here: Hydra's schema, the arch groups (deltas on the
defaults), export families, the docs' table of keys, fine-tune and architecture rules, and the
spelling of positions from before they moved under `model`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from helpers.config import model_of
from xfmr.api.choices import model_key_problem
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig, PosConfig, default_of
from xfmr.nn.model_keys import differences, fine_tune_keys, keys_table, model_keys, resume_keys
from xfmr.paths import config_dir
from xfmr.schema import model_schema

ROOT = Path(__file__).resolve().parents[2]


def _override(text: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(text)


def test_the_docs_table_is_written_from_the_fields() -> None:
    page = (ROOT / "docs" / "architectures.md").read_text(encoding="utf-8")
    block = page.split("<!-- model-keys: begin -->\n")[1].split("\n<!-- model-keys: end -->")[0]
    assert block == keys_table(), (
        "regenerate the table in docs/architectures.md with xfmr.nn.config.keys_table()"
    )


def test_hydras_schema_is_the_dataclass() -> None:
    schema = OmegaConf.to_container(OmegaConf.structured(model_schema()))
    fields = {f.name for f in dataclasses.fields(ModelConfig)} - {"vocab_size"}
    assert set(schema) == fields
    for name, value in schema.items():
        if name != "pos":
            assert value == default_of(name), name
    assert schema["pos"] == {k[4:]: default_of(k) for k in model_keys() if k.startswith("pos.")}


def test_arch_groups_state_only_what_differs() -> None:
    """An arch YAML restating a default would hide a later change of it. The rnn group sets the
    size group's n_heads and d_ff back to the defaults, which an RNN does not read."""
    resets = {("rnn", "n_heads"), ("rnn", "d_ff")}
    for path in sorted((config_dir() / "arch").glob("*.yaml")):
        model = yaml.safe_load(path.read_text())["model"]
        for key, value in model.items():
            if key == "arch" or (path.stem, key) in resets:
                continue
            assert value != default_of(key), f"{path.name}: model.{key}={value} is the default"


def test_every_key_an_export_family_lists_is_a_model_key() -> None:
    from xfmr.interop.hf_families import FAMILIES

    keys = set(model_keys())
    for family in FAMILIES.values():
        assert set(family.needs) <= keys, (family.hf_class, set(family.needs) - keys)


def test_fine_tune_keys_are_declared_on_the_fields() -> None:
    assert fine_tune_keys() == {
        "vocab_size",
        "dropout",
        "attn_dropout",
        "init_std",
        "tie_embeddings",
        "share_embeddings",
        "n_layers",
        "n_decoder_layers",
        "type_vocab_size",
        "pos.max_positions",
        "activation_checkpointing",
        "target_params",
    }


def test_resume_keys_are_declared_on_the_fields() -> None:
    """Only what changes how a model computes, not its parameters or its outputs, and how its
    width is chosen (the width chosen is compared itself)."""
    assert resume_keys() == {"activation_checkpointing", "target_params"}


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"arch": "rnn", "norm": "rmsnorm"}, "model.norm='rmsnorm' applies to arch in"),
        ({"arch": "rnn", "qk_norm": "rmsnorm"}, "model.qk_norm='rmsnorm' applies to arch in"),
        ({"arch": "decoder", "type_vocab_size": 2}, "['encoder', 'encoder_decoder'] only"),
        (
            {"arch": "encoder", "rnn_cell": "gru"},
            "applies to arch in ['rnn'] only, not arch=encoder",
        ),
    ],
)
def test_a_key_the_architecture_does_not_read_is_refused(values: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        ModelConfig.check_applies(values)


def test_command_line_keys_are_judged_from_the_fields() -> None:
    problem = model_key_problem(_override("model.d_modle=64"))
    assert problem.startswith("model.d_modle is not a model key: did you mean model.d_model?")
    assert (
        model_key_problem(_override("model.d_model=abc"))
        == "model.d_model='abc' must be an integer"
    )
    assert "did you mean model.pos.max_positions" in model_key_problem(
        _override("model.pos.max_positons=3")
    )
    old = model_key_problem(_override("pos.max_positions=2048"))
    assert old.startswith("pos.max_positions=2048 is spelled model.pos.max_positions=2048 now")
    for fine in ("model.d_model=64", "model.d_model=32,64", "model.pos.scale=0.5", "pos=rotary"):
        assert model_key_problem(_override(fine)) is None, fine


def test_a_config_saved_before_positions_moved_reads_the_same_model() -> None:
    """Run directories keep their config.yaml: the old shape (a `pos` section beside `model`,
    null for other architectures' keys) is read as today's."""
    old = OmegaConf.create(
        {
            "model": {"arch": "decoder", "d_model": 64, "n_heads": 2, "type_vocab_size": None},
            "pos": {"name": "rotary", "max_positions": None},
        }
    )
    read = model_of(old, vocab_size=9)
    assert (read.pos.name, read.pos.max_positions, read.type_vocab_size) == ("rotary", None, 0)
    with pytest.raises(UserError, match="model.n_headz is not a model key"):
        model_of(OmegaConf.create({"model": {"n_headz": 2}}), vocab_size=9)


def test_one_function_says_how_two_models_differ() -> None:
    none = PosConfig(name="none")
    ours = ModelConfig(vocab_size=9, arch="rnn", n_heads=2, pos=none)
    theirs = ModelConfig(vocab_size=9, arch="rnn", n_heads=4, d_model=64, pos=none)
    assert differences(ours, theirs) == [("d_model", 128, 64)], "an rnn reads no n_heads"
    rotary = ModelConfig(vocab_size=9, pos=PosConfig(name="rotary"))
    assert differences(ModelConfig(vocab_size=9), rotary) == [("pos.name", "learned", "rotary")]
    assert differences(ours, theirs, ignore=frozenset({"d_model"})) == []
