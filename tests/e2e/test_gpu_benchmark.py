"""benchmarks/gpu_shakespeare.py's CPU path: the same runs as on a GPU (xfmr-train and
nanoGPT's train.py from a temporary copy, both scored on xfmr's validation blocks; the
GPT-2-shaped model beside nanoGPT's, and its profile), shrunk to two layers and eight steps and
eager only, prints its tables and goals and writes every row to --out-json. The GPU figures
themselves need a GPU run (docs/benchmarks.md)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

SHARED = Path(os.environ.get("XFMR_SHARED", ROOT.parent / "shared"))
NANOGPT = SHARED / "third_party" / "nanoGPT"
SHAKESPEARE = SHARED / "data" / "tinyshakespeare" / "input.txt"
TABLE_ROW = re.compile(
    r"^\| (xfmr-train|nanoGPT train\.py) \| (\S+) \| (\S+) \| ([\d.]+) \| ([\d.]+)x \| "
    r"([\d.]+)% \| ([\d.]+|-) \|$",
    re.MULTILINE,
)
GOAL_LINE = re.compile(r"^goal: (.+): (pass|FAIL|not measured) \((.*)\)$", re.MULTILINE)


def printed_rows(table: str) -> list[dict]:
    return [
        {
            "run": run,
            "compile": compile,
            "precision": precision,
            "ms_per_step": float(ms),
            "vs_nanogpt": float(ratio),
            "mfu": float(mfu) / 100,
            "val_loss": None if loss == "-" else float(loss),
        }
        for run, compile, precision, ms, ratio, mfu, loss in TABLE_ROW.findall(table)
    ]


def assert_same_row(printed: dict, written: dict) -> None:
    """A printed row is the written one, to the digits printed: each written number formats as
    the table printed it. (A tolerance of half the last digit fails now and then: results.json
    keeps ms/step to 3 decimals, so 12.345 printed as 12.35 sits on its edge.)"""
    assert {k: written[k] for k in ("run", "compile", "precision")} == {
        k: printed[k] for k in ("run", "compile", "precision")
    }
    for key, spec in (("ms_per_step", ".2f"), ("vs_nanogpt", ".2f"), ("mfu", ".1%")):
        assert format(printed[key], spec) == format(written[key], spec), key
    if printed["val_loss"] is None:
        assert written["val_loss"] is None
    else:
        assert format(printed["val_loss"], ".4f") == format(written["val_loss"], ".4f")


@pytest.mark.slow
@pytest.mark.skipif(
    not (NANOGPT / "train.py").is_file() or not SHAKESPEARE.is_file(),
    reason="needs nanoGPT and tiny Shakespeare under ../shared (XFMR_SHARED)",
)
def test_the_gpu_benchmark_runs_its_cpu_path_and_prints_its_tables(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_shakespeare.py"),
        f"--nanogpt={NANOGPT}",
        f"--data={SHAKESPEARE}",
        f"--out={tmp_path / 'out'}",
        f"--out-json={out_json}",
        "--device=cpu",
        "--tiny",
        "--steps=8",
        "--gpt2-steps=8",
        "--no-compile",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"^device: .+; torch \S+; lightning \S+$", out, re.M), out
    assert re.search(r"^command: python \S+gpu_shakespeare\.py .*--no-compile", out, re.M), out
    # A CPU's peak is measured (a GPU's is its datasheet's), and the line names which.
    peak = re.search(r"^peak: [\d.]+ TFLOP/s \((measured: .*float32 matmuls.*)\)$", out, re.M)
    assert peak, out

    shakespeare, gpt2 = out.split("\nGPT-2-small-shaped, ")
    shakespeare_rows, gpt2_rows = printed_rows(shakespeare), printed_rows(gpt2)
    eager_pair = [
        ("xfmr-train", "false", "32-true"),
        ("nanoGPT train.py", "false", "float32"),
    ]  # --no-compile: neither compile=true nor reduce-overhead rows
    for rows in (shakespeare_rows, gpt2_rows):
        assert [(r["run"], r["compile"], r["precision"]) for r in rows] == eager_pair, out
        xfmr, nanogpt = rows
        assert nanogpt["vs_nanogpt"] == 1.0, out
        ratio = xfmr["ms_per_step"] / nanogpt["ms_per_step"]
        assert xfmr["vs_nanogpt"] == pytest.approx(ratio, abs=0.01, rel=0.01), out
        assert all(r["ms_per_step"] > 0 and r["mfu"] > 0 for r in rows), out
    for row in shakespeare_rows:
        # Eight steps from ln(65) = 4.17: both still near it, both scored on the same blocks.
        assert 3.0 < row["val_loss"] < 4.6, out
    assert all(row["val_loss"] is None for row in gpt2_rows), out  # speed only

    printed_goals = GOAL_LINE.findall(out)
    verdicts = {goal.split(":")[0]: verdict for goal, verdict, _ in printed_goals}
    assert list(verdicts) == ["eager", "compiled", "CUDA graphs", "GPT-2-small shape"], out
    assert verdicts["eager"] in ("pass", "FAIL"), out
    assert {verdicts[g] for g in ("compiled", "CUDA graphs", "GPT-2-small shape")} == {
        "not measured"
    }, out

    written = json.loads(out_json.read_text())
    assert written["peak_flops_source"] == peak[1] and written["precision"] == "32-true"
    assert [row["table"] for row in written["rows"]] == ["shakespeare"] * 2 + ["gpt2"] * 2
    for printed, row in zip(shakespeare_rows + gpt2_rows, written["rows"], strict=True):
        assert_same_row(printed, row)
    assert [(g["goal"], g["verdict"], g["detail"]) for g in written["goals"]] == printed_goals
    # One peak for every row: at one table's FLOPs per token, MFU x ms/step is the same.
    for table in ("shakespeare", "gpt2"):
        xfmr, nanogpt = (r for r in written["rows"] if r["table"] == table)
        assert math.isclose(
            xfmr["mfu"] * xfmr["ms_per_step"], nanogpt["mfu"] * nanogpt["ms_per_step"], rel_tol=1e-9
        )

    assert "steps profiled:" in out and "| matmul |" in out and "| total |" in out, out
    assert "| operator | where | ms/step | share |" in out, out
    assert not (tmp_path / "out" / "nanoGPT").exists()  # the copy was a temporary one
