"""benchmarks/gpu_shakespeare.py's CPU path: the same runs as on a GPU (xfmr-train and
nanoGPT's train.py from a temporary copy, both scored on xfmr's validation blocks; the
GPT-2-shaped model and its profile), shrunk to two layers and eight steps, prints its tables.
The GPU figures themselves need a GPU run (docs/benchmarks.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("XFMR_SHARED", ROOT.parent / "shared"))
NANOGPT = SHARED / "third_party" / "nanoGPT"
SHAKESPEARE = SHARED / "data" / "tinyshakespeare" / "input.txt"


@pytest.mark.slow
@pytest.mark.skipif(
    not (NANOGPT / "train.py").is_file() or not SHAKESPEARE.is_file(),
    reason="needs nanoGPT and tiny Shakespeare under ../shared (XFMR_SHARED)",
)
def test_the_gpu_benchmark_runs_its_cpu_path_and_prints_its_tables(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_shakespeare.py"),
        f"--nanogpt={NANOGPT}",
        f"--data={SHAKESPEARE}",
        f"--out={tmp_path / 'out'}",
        "--device=cpu",
        "--tiny",
        "--steps=8",
        "--gpt2-steps=8",
        "--no-compile",
        "--peak-tflops=0.1",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    rows = re.findall(r"^\| (xfmr-train|nanoGPT train\.py) \| no \| (\S+) \| ([\d.]+) \| "
                      r"([\d.]+)% \| ([\d.]+) \|$", out, re.MULTILINE)  # fmt: skip
    assert [(run, precision) for run, precision, *_ in rows] == [
        ("xfmr-train", "32-true"),
        ("nanoGPT train.py", "float32"),
    ], out
    for _, _, ms, mfu, val_loss in rows:
        # Eight steps from ln(65) = 4.17: both still near it, both scored on the same blocks.
        assert float(ms) > 0 and float(mfu) > 0 and 3.0 < float(val_loss) < 4.6, out
    assert re.search(r"^\| xfmr-train \| 32-true \| [\d.]+ \| [\d.]+% \|$", out, re.MULTILINE)
    assert "steps profiled:" in out and "| matmul |" in out and "| total |" in out, out
    assert "| operator | where | ms/step | share |" in out, out
    assert not (tmp_path / "out" / "nanoGPT").exists()  # the copy was a temporary one
