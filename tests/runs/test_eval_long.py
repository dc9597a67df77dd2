"""Evaluating past the trained length: a causal model run on longer windows than it trained on
keeps what it computed on the shorter ones (the contract that makes extrapolation meaningful),
and `xfmr-eval data.block_size=N` writes the loss at each position of the windows as a CSV and
a PNG, for every scheme but learned positions past their table, which are refused."""

from __future__ import annotations

import copy
import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.models import randomize
from xfmr.nn import ModelConfig, PosConfig, build_model
from xfmr.nn.config import EXTENDING_POSITIONS, POS_NAMES
from xfmr.nn.positions import SinusoidalPositions, extend_positions
from xfmr.objectives.config import ObjectiveConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TRAINED = 16  # data.block_size of every run here
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _model(pos: str, *, arch: str = "decoder") -> torch.nn.Module:
    """A tiny causal model whose tables, where it has any, hold the trained length alone."""
    config = ModelConfig(
        vocab_size=50,
        arch=arch,
        n_layers=2,
        n_heads=2,
        d_model=32,
        pos=PosConfig(name=pos, max_positions=TRAINED),
    )
    return randomize(build_model(config), std=0.3)


# --- the model: longer windows leave the first positions as they were ---------------------


@pytest.mark.parametrize(
    ("arch", "pos"), [*(("decoder", name) for name in EXTENDING_POSITIONS), ("rnn", "none")]
)
def test_a_causal_model_run_longer_gives_the_same_logits_on_the_first_positions(
    arch: str, pos: str
) -> None:
    """Built at 16 positions, run at 64: the first 16 logits are those of a run at 16, and
    readying the model for 64 changes no weight."""
    model = _model(pos, arch=arch)
    ids = torch.randint(0, 50, (2, 4 * TRAINED), generator=torch.Generator().manual_seed(0))
    weights = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        short = model(ids[:, :TRAINED])
        extend_positions(model, 4 * TRAINED)
        long = model(ids)
    assert long.shape == (2, 4 * TRAINED, 50)
    torch.testing.assert_close(long[:, :TRAINED], short, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(long).all()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_a_sinusoid_table_grows_by_its_formula_and_keeps_its_rows() -> None:
    model = _model("sinusoidal")
    with pytest.raises(ValueError, match="extend_positions"):
        model(torch.zeros(1, TRAINED + 1, dtype=torch.long))
    scheme = next(m for m in model.modules() if isinstance(m, SinusoidalPositions))
    before = scheme.table.clone()
    extend_positions(model, 4 * TRAINED)
    assert scheme.max_positions == 4 * TRAINED
    assert torch.equal(scheme.table[:TRAINED], before)  # bit for bit
    built_long = SinusoidalPositions(
        d_model=32, max_positions=4 * TRAINED, sinusoid_scale=scheme.scale
    )
    torch.testing.assert_close(scheme.table, built_long.table, rtol=0, atol=1e-7)
    assert scheme.scale == pytest.approx(0.02)  # init_std: the table kept the model's scale


def test_only_learned_positions_cannot_extend_past_their_table() -> None:
    for pos in POS_NAMES:
        model = _model(pos)
        extend_positions(model, TRAINED)  # within any table: nothing to do
        if pos in EXTENDING_POSITIONS:
            extend_positions(model, 4 * TRAINED)
        else:
            with pytest.raises(ValueError, match="16 learned positions"):
                extend_positions(model, 4 * TRAINED)


# --- xfmr-eval past the trained length ----------------------------------------------------


def _train(tmp: Path, overrides: list[str]) -> Path:
    from xfmr.training.run import run_training

    cfg = compose_config(
        tmp, ["size=tiny", "callbacks.text_sample=null", "trainer.max_steps=3", *overrides]
    )
    run_training(cfg)
    return Path(cfg.paths.output_dir)


@pytest.fixture(scope="module", params=EXTENDING_POSITIONS)
def scheme_run(request, tmp_path_factory) -> tuple[str, Path]:
    """A causal LM trained on blocks of 16 with each extending scheme; the sinusoid table holds
    16 rows, so that evaluating longer must grow it."""
    pos = request.param
    table = [f"model.pos.max_positions={TRAINED}"] if pos == "sinusoidal" else []
    return pos, _train(tmp_path_factory.mktemp(pos), [f"pos={pos}", *table])


def _eval(run_dir: Path, cwd: Path, *args: str):
    return run_cli([f"run_dir={run_dir}", *args], cwd, module="xfmr.cli.eval")


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("factor", [2, 4])
def test_eval_past_the_trained_length_writes_loss_by_position(
    scheme_run: tuple[str, Path], factor: int, tmp_path: Path
) -> None:
    pos, run_dir = scheme_run
    length = factor * TRAINED
    out = tmp_path / "long.json"
    result = _eval(run_dir, tmp_path, f"data.block_size={length}", f"out={out}")
    assert result.returncode == 0, result.output
    report = json.loads(out.read_text())
    assert report["data"]["block_size"] == length
    section = report["by_position"]
    assert section["pos"] == pos and section["trained_block_size"] == TRAINED
    assert section["block_size"] == length
    csv_path, png_path = Path(section["csv"]), Path(section["plot"])
    assert csv_path == tmp_path / "long.by_position.csv"
    assert png_path.read_bytes()[:8] == PNG_MAGIC
    assert str(csv_path) in result.stdout and str(png_path) in result.stdout
    assert "past the trained length" in result.stdout

    rows = _rows(csv_path)
    assert [int(r["position"]) for r in rows] == list(range(length))
    losses = [float(r["loss"]) for r in rows]
    targets = [int(r["targets"]) for r in rows]
    assert all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert sum(targets) == report["targets"] and len(set(targets)) == 1  # full windows only
    weighted = sum(loss * n for loss, n in zip(losses, targets, strict=True)) / sum(targets)
    assert weighted == pytest.approx(report["loss"], rel=1e-5)
    within = sum(losses[:TRAINED]) / TRAINED
    assert section["loss_within_trained"] == pytest.approx(within, rel=1e-9)
    past = sum(losses[TRAINED:]) / (length - TRAINED)
    assert section["loss_past_trained"] == pytest.approx(past, rel=1e-9)


def test_the_first_positions_are_scored_as_the_model_at_the_trained_length_scores_them(
    scheme_run: tuple[str, Path], tmp_path: Path
) -> None:
    """Positions 0-15 of an eval at 64 against the run's model given only the first 17 tokens
    of the same windows, computed here. (An eval at 16 reads other windows, every 16 tokens
    instead of every 64, so its curve is a different average.) At the trained length the
    report says nothing is past it."""
    from xfmr.runs.evaluation import attach_data
    from xfmr.runs.loading import load_run

    pos, run_dir = scheme_run
    length = 4 * TRAINED
    out = tmp_path / "long.json"
    assert _eval(run_dir, tmp_path, f"data.block_size={length}", f"out={out}").returncode == 0
    curve = [float(r["loss"]) for r in _rows(tmp_path / "long.by_position.csv")]

    run = load_run(run_dir)
    data = run.config.data.with_settings(block_size=length, val_batches=None)
    sums, windows = torch.zeros(TRAINED, dtype=torch.float64), 0
    with torch.no_grad():
        for batch in attach_data(run, data).val_dataloader():
            logits = run.model(batch["input_ids"][:, :TRAINED])  # the trained length only
            losses = F.cross_entropy(
                logits.transpose(1, 2), batch["labels"][:, :TRAINED], reduction="none"
            )
            sums += losses.double().sum(0)
            windows += len(losses)
    expected = (sums / windows).tolist()
    assert curve[:TRAINED] == pytest.approx(expected, rel=1e-5)

    at_trained = _eval(run_dir, tmp_path, f"out={tmp_path / 'trained.json'}")
    assert at_trained.returncode == 0, at_trained.output
    section = json.loads((tmp_path / "trained.json").read_text())["by_position"]
    assert section["block_size"] == TRAINED and section["loss_past_trained"] is None
    assert len(_rows(tmp_path / "trained.by_position.csv")) == TRAINED


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory) -> Path:
    """Learned positions, a table of 32 rows, trained on blocks of 16."""
    return _train(tmp_path_factory.mktemp("learned"), ["pos=learned", "model.pos.max_positions=32"])


def test_learned_positions_past_their_table_are_refused_in_one_line(
    learned_run: Path, tmp_path: Path
) -> None:
    result = _eval(learned_run, tmp_path, "data.block_size=64")
    assert result.returncode == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in ("data.block_size=64", "32 learned positions", "data.block_size=16", "rotary"):
        assert needle in result.stderr, result.stderr
    assert not (learned_run / "eval.json").exists()

    # Within the table they run, the untrained rows named as such; by_position=false: no curve.
    inside = _eval(learned_run, tmp_path, "data.block_size=32", "by_position=false")
    assert inside.returncode == 0, inside.output
    assert "by position" not in inside.stdout
    assert not (learned_run / "eval.by_position.csv").exists()
    inside = _eval(learned_run, tmp_path, "data.block_size=32")
    assert inside.returncode == 0, inside.output
    assert "pos=learned: positions never trained" in inside.stdout
    assert len(_rows(learned_run / "eval.by_position.csv")) == 32


def test_by_position_is_for_causal_lm_runs() -> None:
    from xfmr.errors import UserError
    from xfmr.runs.evaluation_data import wants_by_position

    def run(objective: str) -> Any:
        section = ObjectiveConfig.read({"_target_": f"xfmr.objectives.{objective}"})
        return SimpleNamespace(objective=section)  # what wants_by_position reads of a config

    clm, mlm = run("clm.CausalLMObjective"), run("mlm.MaskedLMObjective")
    for asked, on_clm, on_mlm in ((None, True, False), (False, False, False)):
        assert wants_by_position(asked, clm) is on_clm
        assert wants_by_position(asked, mlm) is on_mlm
    assert wants_by_position(True, clm)
    with pytest.raises(UserError, match="objective is mlm"):
        wants_by_position(True, mlm)
    with pytest.raises(UserError, match="by_position='yes'"):
        wants_by_position("yes", clm)
