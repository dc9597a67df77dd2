"""Mistakes the config or the files it names already show are refused before torch loads: one
line naming the key, the value and what would be valid, no traceback, a non-zero exit, and no
run directory left behind (an existing one untouched)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.config import compose_config
from helpers.runs import TINY
from xfmr.text.tokenizers import TokenizerSpec, train_tokenizer

# The real CLI, reporting at exit which heavy modules it had imported by then.
PROBE = """\
import atexit, sys
atexit.register(lambda: print(
    "loaded:", sorted({m.split(".")[0] for m in sys.modules} & {"torch", "lightning"}),
    file=sys.stderr,
))
sys.argv = ["xfmr-train", *sys.argv[1:]]
from xfmr.cli.train import main
main()
"""
# Generous for a loaded two-core machine; without torch an answer takes about a second.
SECONDS = 8.0


def _refuse(args: list[str], cwd: Path, *needles: str) -> str:
    """Run xfmr-train with `args`; it must refuse them in one line holding every needle."""
    env = {**os.environ, "XFMR_CACHE_DIR": str(cwd / ".cache")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    output = proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, output
    assert "Traceback" not in output, output
    assert lines[-1] == "loaded: []", f"torch or Lightning loaded before the refusal:\n{output}"
    assert len(lines) == 2 and lines[0].startswith("xfmr-train: error: "), output
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in:\n{lines[0]}"
    assert elapsed < SECONDS, f"{elapsed:.1f} s to refuse {args}"
    return lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["trainer.max_steps=0"], ["trainer.max_steps=0", "an integer >= 1", "-1"]),
        (["trainer.max_steps=-5"], ["trainer.max_steps=-5", "an integer >= 1"]),
        (["trainer.max_steps=-1"], ["trainer.max_steps=-1", "trainer.max_epochs=-1 never ends"]),
        (["trainer.max_steps=1e3"], ["trainer.max_steps=1000.0", "an integer"]),
        (
            ["schedule.warmup_steps=10"],
            ["schedule.warmup_steps=10", "trainer.max_steps=4", "schedule.warmup_steps<=4"],
        ),
        (["schedule=noam", "schedule.warmup_steps=0"], ["schedule.warmup_steps=0", ">=1"]),
        (["schedule.min_lr_ratio=2"], ["schedule.min_lr_ratio=2", "[0, 1]"]),
        (["optim.lr=abc"], ["optim.lr='abc'", "a number >= 0"]),
        (["optim.lr=-1"], ["optim.lr=-1", "a number >= 0"]),
        (["optim.betas=[0.9,1.5]"], ["optim.betas=[0.9, 1.5]", "2 numbers, each in [0, 1)"]),
        (["data.batch_size=2.5"], ["data.batch_size=2.5", "an integer >= 1"]),
        (["data.val_fraction=1.5"], ["data.val_fraction=1.5", "(0, 1)"]),
        (["data.val_fraction=-0.1"], ["data.val_fraction=-0.1", "(0, 1)"]),
        (["model.d_model=-4"], ["d_model=-4", "positive integer"]),
        (["model.d_model=abc"], ["d_model='abc'", "an integer"]),
        (["model.dropout=1.5"], ["dropout=1.5", "[0, 1)"]),
        (["seed=abc"], ["seed='abc'", "an integer in [0, 4294967295]"]),
        (["trainer.val_check_interval=0"], ["trainer.val_check_interval=0", "(0, 1]"]),
        (["trainer.accumulate_grad_batches=0"], ["trainer.accumulate_grad_batches=0", ">= 1"]),
        (["trainer.limit_val_batches=2.5"], ["trainer.limit_val_batches=2.5", "[0, 1]"]),
        (["trainer.precision=8"], ["trainer.precision='8'", "bf16-mixed", "32-true"]),
        (
            ["trainer.precision=16-mixed", "trainer.accelerator=cpu"],
            ["trainer.precision=16-mixed on a CPU", "bf16-mixed"],
        ),
        (
            ["trainer=ddp", "trainer.accelerator=cpu", f"trainer.devices={os.cpu_count() + 1}"],
            [f"trainer.devices={os.cpu_count() + 1}", "on the CPU", "trainer.devices<="],
        ),
        (["trainer.devices=0"], ["trainer.devices=0", "an integer >= 1"]),
        (["nonfinite.max_skips=-1"], ["nonfinite.max_skips=-1", "an integer >= 0"]),
    ],
)
def test_bad_number_is_refused_by_name(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    _refuse([*TINY, f"hydra.run.dir={tmp_path / 'run'}", *args], tmp_path, *needles)
    assert not (tmp_path / "run").exists(), "a refused run leaves no run directory"


def test_run_directory_that_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    run_dir = blocker / "run"
    _refuse([*TINY, f"hydra.run.dir={run_dir}"], tmp_path, f"hydra.run.dir='{run_dir}'", "cannot")
    assert blocker.read_text() == "not a directory"


def test_data_file_that_is_not_text(tmp_path: Path) -> None:
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    args = [*TINY, "data=text", f"data.path={binary}", f"hydra.run.dir={tmp_path / 'run'}"]
    _refuse(args, tmp_path, f"data.path file '{binary}' is not text", "UTF-8")
    assert not (tmp_path / "run").exists()


def test_tokenizer_file_that_is_corrupt(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    train_tokenizer(TokenizerSpec(kind="char"), iter(["some text"])).save(good)
    corrupt = tmp_path / "tokenizer.json"
    corrupt.write_text(good.read_text()[:100])  # cut off mid-file
    args = [*TINY, "tokenizer=pretrained", f"tokenizer.path={corrupt}"]
    _refuse(
        [*args, f"hydra.run.dir={tmp_path / 'run'}"],
        tmp_path,
        f"tokenizer.path='{corrupt}' is not a tokenizer.json",
    )
    assert not (tmp_path / "run").exists()


def test_resume_with_a_model_of_another_shape_leaves_the_run_untouched(tmp_path: Path) -> None:
    """A run directory's last.ckpt is resumed; its config.yaml says what model it holds."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "saved").mkdir()
    (run_dir / "config.yaml").write_text(
        compose_config(tmp_path / "saved", ["size=tiny"]).to_yaml()
    )
    last = run_dir / "checkpoints" / "last.ckpt"
    last.parent.mkdir()
    last.write_bytes(b"a checkpoint")
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (last, run_dir / "config.yaml")}
    _refuse(
        [*TINY, f"hydra.run.dir={run_dir}", "model.d_model=32"],
        tmp_path,
        "last.ckpt, which this run would resume",
        "d_model: checkpoint 64 vs config 32",
        "hydra.run.dir",
    )
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in before} == before
