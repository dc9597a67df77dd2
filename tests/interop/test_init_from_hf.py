"""`init_from=hf:PATH`: a run starts from a local Hugging Face checkpoint and its tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers.config import compose_config
from helpers.runs import CORPUS
from xfmr.errors import UserError
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

transformers = pytest.importorskip("transformers")


def _gpt2_checkpoint(path: Path) -> transformers.GPT2LMHeadModel:
    tokenizer = train_tokenizer(TokenizerSpec(kind="char"), iter([CORPUS]))
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=4
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(path)
    tokenizer.save(path / "tokenizer.json")
    return model


def test_run_starts_from_the_checkpoint_weights(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    hf = _gpt2_checkpoint(tmp_path / "gpt2")
    # lr 0: the saved weights are the loaded ones.
    cfg = compose_config(
        tmp_path, [f"init_from=hf:{tmp_path / 'gpt2'}", "optim.lr=0.0", "schedule=constant"]
    )
    results = run_training(cfg)
    state = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    weights = state["state_dict"]
    hf_weights = hf.state_dict()
    assert torch.equal(
        weights["model.backbone.tok_emb.weight"], hf_weights["transformer.wte.weight"]
    )
    assert torch.equal(
        weights["model.backbone.blocks.1.attn.qkv.weight"],
        hf_weights["transformer.h.1.attn.c_attn.weight"].T,  # GPT-2's Conv1D stores (in, out)
    )
    assert (tmp_path / "run" / "tokenizer.json").read_text() == (
        tmp_path / "gpt2" / "tokenizer.json"
    ).read_text()
    assert results["n_parameters"] == sum(p.numel() for p in hf.parameters())


def test_block_longer_than_checkpoint_positions_is_refused(tmp_path: Path) -> None:
    from xfmr.training.run import run_training

    _gpt2_checkpoint(tmp_path / "gpt2")
    cfg = compose_config(tmp_path, [f"init_from=hf:{tmp_path / 'gpt2'}", "data.block_size=64"])
    with pytest.raises(UserError, match="data.block_size=64 .* 32 learned positions"):
        run_training(cfg)


def test_missing_checkpoint_files_are_named(tmp_path: Path) -> None:
    from xfmr.parts.sources import init_source

    with pytest.raises(UserError, match="config.json is missing"):
        init_source(f"hf:{tmp_path}")
    with pytest.raises(UserError, match="without checkpoints/best.ckpt or last.ckpt"):
        init_source(str(tmp_path))
    with pytest.raises(UserError, match="does not exist: give an xfmr run directory"):
        init_source(str(tmp_path / "nowhere"))
