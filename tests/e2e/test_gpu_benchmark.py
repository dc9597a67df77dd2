"""benchmarks/gpu_shakespeare.py's CPU path: the same runs as on a GPU (xfmr-train and
nanoGPT's train.py from a temporary copy, both scored on xfmr's validation blocks; the
GPT-2-shaped model beside nanoGPT's, and its profile), shrunk to two layers and eight steps and
eager only, prints its tables and goals and writes every row to --out-json. The GPU figures
themselves need a GPU run (docs/benchmarks.md).

The script's `main` runs in the test's process; each run it starts (xfmr-train, nanoGPT's
train.py) is still a process of its own with the script's command and environment, only forked
from the tests' server with torch imported (helpers/experiment_scripts.py `run_quietly`) rather
than from a new interpreter: the tables time the runs' steps, not Python's start-up."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.experiment_scripts import script_in_process

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


def printed_by_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """What the script's `main` prints on its CPU path, shrunk: tiny, eager, eight steps; its
    rows also written to tmp_path/bench.json."""
    script = script_in_process("gpu_shakespeare", monkeypatch)
    monkeypatch.setattr(sys, "argv", [
        str(ROOT / "benchmarks" / "gpu_shakespeare.py"),
        f"--nanogpt={NANOGPT}",
        f"--data={SHAKESPEARE}",
        f"--out={tmp_path / 'out'}",
        f"--out-json={tmp_path / 'bench.json'}",
        "--device=cpu",
        "--tiny",
        "--steps=8",
        "--gpt2-steps=8",
        "--gpt2-vocab=gpt2",  # GPT-2's padded 50,304 rows over the characters
        "--loss-chunk=32,16",  # xfmr's GPT-2-shaped run again for each, its head in chunks
        "--no-compile",
    ])  # fmt: skip
    monkeypatch.setenv("XFMR_CACHE_DIR", str(tmp_path / "cache"))
    script.main()
    return capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(
    not (NANOGPT / "train.py").is_file() or not SHAKESPEARE.is_file(),
    reason="needs nanoGPT and tiny Shakespeare under ../shared (XFMR_SHARED)",
)
def test_the_gpu_benchmark_runs_its_cpu_path_and_prints_its_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json = tmp_path / "bench.json"
    out = printed_by_main(tmp_path, monkeypatch, capsys)
    assert re.search(r"^device: .+; torch \S+; lightning \S+$", out, re.M), out
    assert re.search(r"^command: python \S+gpu_shakespeare\.py .*--no-compile", out, re.M), out
    # A CPU's peak is measured (a GPU's is its datasheet's), and the line names which.
    peak = re.search(r"^peak: [\d.]+ TFLOP/s \((measured: .*float32 matmuls.*)\)$", out, re.M)
    assert peak, out

    shakespeare, gpt2 = out.split("\nGPT-2-small with GPT-2's padded vocabulary, ")
    assert "vocabulary 50304," in gpt2.splitlines()[0], out
    shakespeare_rows, gpt2_rows = printed_rows(shakespeare), printed_rows(gpt2)
    eager_pair = [
        ("xfmr-train", "false", "32-true"),
        ("nanoGPT train.py", "false", "float32"),
    ]  # --no-compile: neither compile=true nor reduce-overhead rows
    chunked = [("xfmr-train", f"false+loss_chunk={n}", "32-true") for n in (32, 16)]
    for rows, expected in ((shakespeare_rows, eager_pair), (gpt2_rows, [*eager_pair, *chunked])):
        assert [(r["run"], r["compile"], r["precision"]) for r in rows] == expected, out
        xfmr, nanogpt = rows[:2]
        assert nanogpt["vs_nanogpt"] == 1.0, out
        ratio = xfmr["ms_per_step"] / nanogpt["ms_per_step"]
        assert xfmr["vs_nanogpt"] == pytest.approx(ratio, abs=0.01, rel=0.01), out
        assert all(r["ms_per_step"] > 0 and r["mfu"] > 0 for r in rows), out
    # The chunked runs against nanoGPT's eager one, as the plain eager run is.
    for row in gpt2_rows[2:]:
        ratio = row["ms_per_step"] / gpt2_rows[1]["ms_per_step"]
        assert row["vs_nanogpt"] == pytest.approx(ratio, abs=0.01, rel=0.01), out
    for row in shakespeare_rows:
        # Eight steps from ln(65) = 4.17: both still near it, both scored on the same blocks.
        assert 3.0 < row["val_loss"] < 4.6, out
    assert all(row["val_loss"] is None for row in gpt2_rows), out  # speed only

    printed_goals = GOAL_LINE.findall(out)
    verdicts = {goal.split(":")[0]: verdict for goal, verdict, _ in printed_goals}
    gpt2_goal = "GPT-2-small shape, GPT-2's vocabulary"
    assert list(verdicts) == ["eager", "compiled", "CUDA graphs", gpt2_goal], out
    assert verdicts["eager"] in ("pass", "FAIL"), out
    assert {verdicts[g] for g in ("compiled", "CUDA graphs", gpt2_goal)} == {"not measured"}, out

    written = json.loads(out_json.read_text())
    assert written["peak_flops_source"] == peak[1] and written["precision"] == "32-true"
    assert [row["table"] for row in written["rows"]] == ["shakespeare"] * 2 + ["gpt2_vocab"] * 4
    for printed, row in zip(shakespeare_rows + gpt2_rows, written["rows"], strict=True):
        assert_same_row(printed, row)
    assert [(g["goal"], g["verdict"], g["detail"]) for g in written["goals"]] == printed_goals
    # One peak for every row: at one table's FLOPs per token, MFU x ms/step is the same.
    for table in ("shakespeare", "gpt2_vocab"):
        xfmr, nanogpt, *chunked_rows = (r for r in written["rows"] if r["table"] == table)
        for row in (nanogpt, *chunked_rows):
            assert math.isclose(
                xfmr["mfu"] * xfmr["ms_per_step"], row["mfu"] * row["ms_per_step"], rel_tol=1e-9
            )

    assert "GPT-2-small-shaped, 32-true, compile=false: " in out, out  # eager by default
    assert "steps profiled:" in out and "| matmul |" in out and "| total |" in out, out
    assert "| operator | where | ms/step | share |" in out, out
    assert not (tmp_path / "out" / "nanoGPT").exists()  # the copy was a temporary one


def test_the_mfu_goal_takes_the_best_compiled_row_and_names_what_it_added(monkeypatch) -> None:
    """The GPT-2 goal's verdict is the best compiled xfmr row's, the plain one or one with a
    setting added (--loss-chunk), and its detail names the setting that got there."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from gpu.report import MFU_GOAL, XFMR, Row, mfu_goal

    def row(mode: str, mfu: float) -> Row:
        return Row("gpt2_vocab", XFMR, mode, "bf16-mixed", 25.0, mfu=mfu)

    plain = row("true", MFU_GOAL - 0.03)
    assert mfu_goal([plain], "gpt2_vocab").verdict == "FAIL"
    goal = mfu_goal([plain, row("true+loss_chunk=4096", MFU_GOAL + 0.01)], "gpt2_vocab")
    assert (goal.verdict, goal.detail) == ("pass", "46.0% with loss_chunk=4096")
    goal = mfu_goal([plain, row("true+loss_chunk=4096", MFU_GOAL - 0.05)], "gpt2_vocab")
    assert (goal.verdict, goal.detail) == ("FAIL", "42.0%")
    # max-autotune is a compiled row too, with or without a setting added.
    tuned = [row("max-autotune", MFU_GOAL - 0.01), row("max-autotune+loss_chunk=8192", 0.3)]
    goal = mfu_goal([plain, *tuned], "gpt2_vocab")
    assert (goal.verdict, goal.detail) == ("FAIL", "44.0% with compile=max-autotune")
    goal = mfu_goal([row("max-autotune+loss_chunk=8192", 0.5)], "gpt2_vocab")
    assert goal.detail == "50.0% with compile=max-autotune, loss_chunk=8192"
    assert mfu_goal([row("reduce-overhead", 0.5)], "gpt2_vocab").verdict == "not measured"
