"""A run with model.vocab_multiple exports to Hugging Face with every row (config.json's
vocab_size is the padded one, as GPT-2 from nanoGPT), the extra ids suppressed in its generation
config; it comes back by init_from=hf:DIR at vocab_multiple 1, and a run that sets
vocab_multiple there, or starts from the xfmr run with another value, is refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from helpers.config import compose_config

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from xfmr.errors import UserError  # noqa: E402
from xfmr.runs.export_hf import export_hf  # noqa: E402
from xfmr.runs.loading import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
GPT2 = ["size=tiny", "model.activation=gelu_tanh", "trainer.enable_model_summary=false"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(run directory, HF folder) of a GPT-2-shaped run of a character vocabulary in 64 rows."""
    from xfmr.training.run import run_training

    root = tmp_path_factory.mktemp("padded")
    run_training(compose_config(root, [*GPT2, "model.vocab_multiple=64"]))
    export_hf(root / "run", root / "hf")
    return root / "run", root / "hf"


@torch.no_grad()
def test_the_export_has_every_row_and_never_generates_the_extra_ones(exported) -> None:
    run_dir, folder = exported
    run = load_run(run_dir)
    real = run.tokenizer.vocab_size
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == 64 > real
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["suppress_tokens"] == list(range(real, 64))
    assert "in 64 rows (model.vocab_multiple=64)" in (folder / "README.md").read_text()
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([run.tokenizer.encode("the quick brown")])
    assert torch.allclose(run.model(ids), hf_model(ids).logits, atol=1e-4)
    sampled = hf_model.generate(ids, do_sample=True, temperature=5.0, max_new_tokens=30)
    assert int(sampled.max()) < real


@torch.no_grad()
def test_init_from_the_export_comes_back_at_vocab_multiple_one(exported, tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    run_dir, folder = exported
    start = [*GPT2, f"init_from=hf:{folder}", "optim.lr=0.0", "schedule=constant"]
    results = run_training(compose_config(tmp_path, [*start, "trainer.max_steps=1"]))
    assert results["init_from"]["skipped"] == [] and results["init_from"]["new"] == []
    started, trained = load_run(tmp_path / "run"), load_run(run_dir)
    assert started.model_config.vocab_size == 64 and started.model_config.vocab_multiple == 1
    ids = torch.tensor([trained.tokenizer.encode("a small cat")])
    assert torch.allclose(started.model(ids), trained.model(ids), atol=1e-5)

    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(UserError) as refused:
        run_training(compose_config(again, [*start, "model.vocab_multiple=64"]))
    assert "model.vocab_multiple=64 does not apply with init_from=hf:" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_init_from_the_run_must_keep_its_rows(exported, tmp_path: Path) -> None:
    run_dir, _ = exported
    with pytest.raises(UserError) as refused:
        compose_config(tmp_path, [*GPT2, f"init_from={run_dir}", "model.vocab_multiple=8"])
    said = str(refused.value)
    assert "model.vocab_multiple: trained 64 vs config 8" in said and "\n" not in said
