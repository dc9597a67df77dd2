"""`init_from`: a Hugging Face checkpoint decides the model, so the config's model is not checked
against it; an xfmr run (its directory, a .ckpt in it, an xfmr-export .safetensors) was trained
as the model the config describes, and the config is checked as without init_from and against
what was trained, before torch loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import run_cli
from helpers.config import compose_config, model_of
from helpers.runs import TINY
from xfmr.errors import UserError


def _pretrained(tmp_path: Path) -> Path:
    """What the config check reads of a finished size=tiny run: its config.yaml (no torch)."""
    root = tmp_path / "pre"
    root.mkdir()
    cfg = compose_config(root, ["size=tiny"])
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(cfg.to_yaml())
    (run / "tokenizer.json").write_text("{}")
    (run / "checkpoints" / "best.ckpt").write_bytes(b"")
    return run


def _exported(tmp_path: Path) -> Path:
    """An xfmr-export file's header (the model config in its metadata), with no tensors."""
    cfg = compose_config(tmp_path, ["size=tiny"])
    config = model_of(cfg, vocab_size=40).to_dict()
    header = json.dumps({"__metadata__": {"model_config": json.dumps(config)}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    (tmp_path / "tokenizer.json").write_text("{}")  # beside it, as xfmr-export writes it
    return path


@pytest.mark.parametrize("source", ["run", "ckpt", "safetensors"])
def test_a_config_that_disagrees_with_what_was_trained_is_refused_naming_the_keys(
    tmp_path: Path, source: str
) -> None:
    pretrained = {
        "run": lambda: _pretrained(tmp_path),
        "ckpt": lambda: _pretrained(tmp_path) / "checkpoints" / "best.ckpt",
        "safetensors": lambda: _exported(tmp_path),
    }[source]()
    out = tmp_path / "fine"
    out.mkdir()
    with pytest.raises(UserError) as refused:
        compose_config(out, ["size=small", f"init_from={pretrained}"])
    message = str(refused.value)
    assert "\n" not in message
    assert f"init_from='{pretrained}' was trained as another model" in message
    assert "model.d_model: trained 64 vs config 128" in message
    assert "model.n_layers" not in message, "depth may change: extra layers start fresh"


def test_what_fine_tuning_may_change_passes(tmp_path: Path) -> None:
    pretrained = _pretrained(tmp_path)
    out = tmp_path / "fine"
    out.mkdir()
    changes = ["model.dropout=0.1", "model.tie_embeddings=false", "model.n_layers=3"]
    compose_config(out, ["size=tiny", f"init_from={pretrained}", *changes])
    with pytest.raises(UserError, match="model.activation: trained 'gelu' vs config 'relu'"):
        compose_config(out, ["size=tiny", f"init_from={pretrained}", "model.activation=relu"])


def test_the_objective_is_checked_against_the_configs_model_unless_hf_decides_it(
    tmp_path: Path,
) -> None:
    pretrained = _pretrained(tmp_path)
    out = tmp_path / "fine"
    out.mkdir()
    mlm_on_a_decoder = ["size=tiny", "objective=mlm", "tokenizer=wordpiece"]
    with pytest.raises(UserError, match="objective=mlm cannot train arch=decoder"):
        compose_config(out, [*mlm_on_a_decoder, f"init_from={pretrained}"])
    # hf:PATH: the checkpoint decides the model (an encoder, say), which the run checks; its
    # files must be there (read when the run loads them).
    bert = tmp_path / "bert"
    with pytest.raises(UserError, match="config.json is missing"):
        compose_config(out, [*mlm_on_a_decoder, f"init_from=hf:{bert}"])
    bert.mkdir()
    (bert / "config.json").write_text("{}")
    (bert / "tokenizer.json").write_text("{}")
    compose_config(out, [*mlm_on_a_decoder, f"init_from=hf:{bert}"])


def test_xfmr_train_refuses_it_in_one_line_before_training(tmp_path: Path, corpus: Path) -> None:
    pretrained = _pretrained(tmp_path)
    result = run_cli(
        [
            *TINY,
            "size=small",
            "data=text",
            f"data.path={corpus}",
            f"init_from={pretrained}",
            f"hydra.run.dir={tmp_path / 'fine'}",
        ],
        tmp_path,
    )
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert f"xfmr-train: error: init_from='{pretrained}' was trained as another model" in (
        result.stderr
    )
    assert not (tmp_path / "fine").exists()
