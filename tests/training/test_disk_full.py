"""A run directory that runs out of space is a fault like a bad value: the run ends with one line
naming the file, the step and what to do, results.json says so, the checkpoints written before
are whole, and the same command resumes from the newest of them once there is room.

The run directory is a 4 MB tmpfs mounted for the test (root on Linux, as CI runs); elsewhere
the test skips."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.runs import CORPUS, PEAK

# Each checkpoint of a size=tiny run is about 2 MB: the third does not fit in 4.
SIZE = "4m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here ({made.stderr.strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_ends_the_run_in_one_line_and_the_same_command_resumes(
    tmp_path: Path, small_disk: Path
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    run_dir = small_disk / "run"
    args = [
        "size=tiny",
        "data=text",
        f"data.path={corpus}",
        "trainer.max_steps=12",
        "trainer.val_check_interval=4",
        "callbacks.periodic_checkpoint.every_n_train_steps=2",
        "callbacks.progress_bar=null",
        "callbacks.text_sample=null",
        "trainer.enable_model_summary=false",
        "print_config=false",
        PEAK,
        f"hydra.run.dir={run_dir}",
    ]
    result = run_cli(args, tmp_path)
    assert result.returncode == 1, result.output
    assert "Traceback" not in result.output
    [error] = [line for line in result.output.splitlines() if "error:" in line]
    assert error.startswith("xfmr-train: error: step "), error
    assert "no space left on the device to write " + str(run_dir / "checkpoints") in error
    assert "resumes from the newest checkpoint" in error
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "failed" and results["reason"] in error
    kept = sorted((run_dir / "checkpoints").glob("*.ckpt"))
    assert kept, "the checkpoints before the full one are there"
    for checkpoint in kept:  # whole: each loads
        assert torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"] > 0
    assert not list((run_dir / "checkpoints").glob(".*.tmp")), "no partial file left behind"

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    again = run_cli(args, tmp_path)
    assert again.returncode == 0, again.output
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["step"] == 12
    assert results["resumed_from"] in {str(c) for c in kept}
