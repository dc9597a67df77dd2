"""A run of `model.target_params=N`: the width is chosen once the tokenizer's vocabulary is
known, said in one line, recorded in config.yaml and the checkpoint, and kept on resume."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers.config import compose_config

LSTM = ["arch=rnn", "model.n_layers=1", "callbacks.text_sample=null"]


def _checked(tmp_path: Path, overrides: list[str]):
    return compose_config(tmp_path, [*LSTM, *overrides])


def _count(vocab_size: int, width: int) -> int:
    """Counted apart from the run: the LSTM built on the CPU."""
    from xfmr.nn import ModelConfig
    from xfmr.nn.models import build_model

    settings = {"arch": "rnn", "n_layers": 1, "d_model": width, "pos": {"name": "none"}}
    model = build_model(ModelConfig.from_settings(settings, vocab_size=vocab_size))
    return sum(p.numel() for p in model.parameters())


def test_a_run_is_sized_says_so_and_resumes_at_its_size(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from xfmr.errors import UserError
    from xfmr.run_dir.files import CONFIG_FILE
    from xfmr.text.tokenizers import TextTokenizer
    from xfmr.training.run import run_training

    caplog.set_level(logging.INFO, logger="xfmr")
    target = 200_000
    results = run_training(_checked(tmp_path, [f"model.target_params={target}"]))
    run = tmp_path / "run"
    vocab = TextTokenizer.load(run / "tokenizer.json").vocab_size
    saved = OmegaConf.load(run / CONFIG_FILE).model
    width = saved.d_model
    assert saved.target_params == target and width != 64  # not the size group's width
    assert results["n_parameters"] == _count(vocab, width)
    assert abs(_count(vocab, width) / target - 1) <= 0.02
    assert abs(_count(vocab, width - 1) - target) > abs(_count(vocab, width) - target)
    assert abs(_count(vocab, width + 1) - target) > abs(_count(vocab, width) - target)
    [line] = [r.message for r in caplog.records if r.message.startswith("model.target_params")]
    gap = _count(vocab, width) / target - 1
    assert line == (
        f"model.target_params={target}: model.d_model={width} gives "
        f"{_count(vocab, width):,} parameters ({gap:+.2%})"
    )
    checkpoint = torch.load(
        run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False
    )
    assert checkpoint["hyper_parameters"]["model_config"]["d_model"] == width

    # Resumed with a target the next width is nearer: the run keeps the width it has, which
    # is still within 2% (a new solve would build another shape than its checkpoint's).
    nearer_next = _count(vocab, width + 1)
    assert abs(_count(vocab, width) / nearer_next - 1) <= 0.02
    caplog.clear()
    more = [f"model.target_params={nearer_next}", "trainer.max_steps=4"]
    resumed = run_training(_checked(tmp_path, more))
    assert resumed["resumed_from"] and resumed["step"] == 4
    assert OmegaConf.load(run / CONFIG_FILE).model.d_model == width
    assert any(f"model.d_model={width} (kept from the run it resumes)" in r.message
               for r in caplog.records)  # fmt: skip

    # A target that no longer fits the checkpoint's width: refused, naming the width.
    far = [f"model.target_params={target * 4}", "trainer.max_steps=6"]
    with pytest.raises(UserError, match=rf"d_model: checkpoint {width} vs config \d+"):
        run_training(_checked(tmp_path, far))


def test_a_target_no_width_reaches_is_refused_before_training(tmp_path: Path) -> None:
    from xfmr.errors import UserError
    from xfmr.training.run import run_training

    with pytest.raises(UserError) as refused:
        run_training(_checked(tmp_path, ["model.target_params=30"]))
    message = str(refused.value)
    assert message.startswith(
        "model.target_params=30: no model.d_model comes within 2%: model.d_model=1 gives"
    )
    assert "raise model.target_params" in message and "\n" not in message
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_checks_take_a_width_the_run_may_choose(tmp_path: Path) -> None:
    """d_model=128 is not a width 6 heads allow, but with a target the run chooses the width:
    checked at the next it may choose."""
    from helpers.config import model_of

    cfg = compose_config(tmp_path, ["model.n_heads=6", "model.target_params=100000"])
    assert model_of(cfg, vocab_size=1).d_model == 132
