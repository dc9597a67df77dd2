"""A padded vocabulary (model.vocab_multiple) adds rows to the LM head that are no token: every
strategy, on every architecture that generates, never chooses them, even where they would win;
and a real run trained with one writes only the tokenizer's ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from helpers.config import compose_config
from xfmr.generation import GenerationConfig, generate, sample_text
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import build_model

VOCAB, MULTIPLE, ROWS = 10, 16, 16  # 10 tokens in 16 rows
START = 1

pytestmark = pytest.mark.usefixtures("one_thread")


def _rigged(arch: str) -> torch.nn.Module:
    """A model of VOCAB tokens in ROWS rows whose extra rows always have the largest logits."""
    pos = "none" if arch == "rnn" else "learned"
    config = ModelConfig(
        vocab_size=VOCAB,
        vocab_multiple=MULTIPLE,
        arch=arch,
        n_layers=1,
        n_heads=2,
        d_model=16,
        pos=PosConfig(name=pos, max_positions=32),
    )
    torch.manual_seed(0)
    model = build_model(config)

    def favour_padding(module, inputs, output):
        return output + torch.cat([torch.zeros(VOCAB), torch.full((ROWS - VOCAB,), 100.0)])

    model.lm_head.register_forward_hook(favour_padding)
    return model


SETTINGS = {
    "greedy": dict(strategy="greedy"),
    "sample": dict(strategy="sample", temperature=2.0, seed=0, n_best=3),
    "top_k": dict(strategy="sample", top_k=ROWS, seed=1),
    "beam": dict(strategy="beam", num_beams=3, n_best=3),
}


@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder", "rnn"])
@pytest.mark.parametrize("strategy", sorted(SETTINGS))
@pytest.mark.parametrize("use_cache", [True, False])
def test_no_strategy_chooses_a_padded_id(arch: str, strategy: str, use_cache: bool) -> None:
    model = _rigged(arch)
    ids = torch.tensor([[2, 3, 4, 5], [6, 7, 8, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    config = GenerationConfig(max_new_tokens=6, use_cache=use_cache, **SETTINGS[strategy])
    start = START if arch == "encoder_decoder" else None
    found = generate(model, ids, mask, config=config, eos_id=None, pad_id=0, decoder_start_id=start)
    tokens = [t for row in found for h in row for t in h.tokens]
    assert len(tokens) >= 2 * 6 and max(tokens) < VOCAB
    assert all(h.score > -float("inf") for row in found for h in row)


def test_without_the_ban_the_rigged_rows_would_win() -> None:
    """The test above can fail: told that every row is a token, greedy picks padding."""
    model = _rigged("decoder")
    config = GenerationConfig(strategy="greedy", max_new_tokens=4)
    found = generate(
        model, torch.tensor([[2, 3]]), config=config, eos_id=None, pad_id=0, vocab_size=ROWS
    )
    assert min(found[0][0].tokens) >= VOCAB


def test_the_tokenizers_vocabulary_bans_what_the_config_does_not_know() -> None:
    """A head padded outside xfmr (an HF checkpoint with more rows than its tokenizer, as GPT-2
    from nanoGPT): `vocab_size`, the tokenizer's, bans the rest."""
    model = _rigged("decoder")
    config = GenerationConfig(strategy="greedy", max_new_tokens=4)
    found = generate(
        model, torch.tensor([[2, 3]]), config=config, eos_id=None, pad_id=0, vocab_size=5
    )
    assert max(found[0][0].tokens) < 5


def test_sample_text_writes_only_tokens() -> None:
    config = GenerationConfig(strategy="sample", temperature=1.5, seed=0)
    out = sample_text(_rigged("decoder"), [2, 3], max_new_tokens=40, config=config, max_context=8)
    assert len(out) == 42 and max(out) < VOCAB


def test_a_run_with_vocab_multiple_trains_and_writes_only_its_tokens(tmp_path: Path) -> None:
    from xfmr.runs.inference import generate_rows, text_task
    from xfmr.runs.loading import load_run
    from xfmr.training.run import run_training

    config = compose_config(
        tmp_path, ["size=tiny", "model.vocab_multiple=64", "trainer.enable_model_summary=false"]
    )
    assert config.model.vocab_multiple == 64
    results = run_training(config)
    assert results["status"] == "completed", results
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["model"]["vocab_multiple"] == 64
    run = load_run(tmp_path / "run")
    real = run.tokenizer.vocab_size
    assert real < 64 and run.model_config.padded_vocab_size == 64
    assert run.model.lm_head.weight.shape[0] == 64
    task = text_task(run)
    prompts = [run.tokenizer.encode("the quick"), run.tokenizer.encode("a small cat")]
    settings = GenerationConfig(
        strategy="sample", temperature=5.0, seed=0, n_best=4, max_new_tokens=20
    )
    found = generate_rows(run, task, prompts, config=settings, batch_size=2)
    tokens = [t for row in found for h in row for t in h.tokens]
    assert len(tokens) == 2 * 4 * 20 and max(tokens) < real
