"""benchmarks/step_overhead.py's quick path: every row (the plain loops, Lightning's loop alone,
xfmr-train bare and with each part added back) runs on a tiny text for a few steps and the
tables show them all: the first row the reference of the ratio column, and every other row
beside a plain step in its own process. The figures themselves need a full run."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.experiment_scripts import run_benchmark

SHARED = Path(os.environ.get("XFMR_SHARED", ROOT.parent / "shared"))
NANOGPT = SHARED / "third_party" / "nanoGPT"
ROWS = [  # --quick's
    "plain loop, nanoGPT's model",
    "Lightning's loop alone, nanoGPT's model",
    "xfmr-train, default callbacks and logging (+ progress bar)",
]


@pytest.mark.slow
def test_the_step_overhead_benchmark_prints_every_row_against_the_plain_loop(
    tmp_path: Path,
) -> None:
    if not (NANOGPT / "model.py").is_file():
        pytest.skip(f"needs nanoGPT's model.py under {NANOGPT} (XFMR_SHARED)")
    text = tmp_path / "input.txt"
    verse = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
    text.write_text(verse * 60, encoding="utf-8")
    args = [
        f"--nanogpt={NANOGPT}",
        f"--data={text}",
        f"--out={tmp_path / 'out'}",
        "--steps=30",
        "--warmup=5",
        "--rounds=1",
        "--quick",  # three rows of the full table's eight: each xfmr-train start costs seconds
    ]
    result = run_benchmark("step_overhead.py", args)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    number = r"(\d+\.\d+)"
    table = re.findall(
        rf"^\| (.+?) \| {number} \| {number} \| {number} \| ([+-]\d+)? \| {number} \|$",
        out,
        re.MULTILINE,
    )
    assert [row[0] for row in table] == ROWS, out
    for _, mean, median, ratio, _, per_round in table:
        assert float(mean) > 0 and float(median) > 0 and float(ratio) > 0, out
        assert per_round == mean, out  # one round: its mean is the row's
    assert table[0][3] == "1.00" and table[0][4] == "", out
    assert all(adds for *_, adds, _ in table[1:]), out
    assert "torch threads in the runs: 1\n" in out, out
    # Every row but the first beside a plain step in its own process: the ratio that counts.
    paired = re.findall(
        rf"^\| (.+?) \| {number} \| {number} \| {number} \| {number} \|$", out, re.MULTILINE
    )
    assert [row[0] for row in paired] == ROWS[1:], out
    for _, ours, plain, ratio, per_round in paired:
        assert abs(float(ours) / float(plain) - float(ratio)) < 0.01 and per_round == ratio, out
    assert re.search(r"^Goal: the default row at 1\.10x .*: \d\.\d\dx, (met|not met)\.$", out, re.M)
    # Each Lightning row's step split where the hooks fall: the parts add up to its mean.
    split = re.findall(r"^\| (.+?) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| ([+-]\d+) \|$", out, re.M)
    assert [row[0] for row in split] == ROWS[1:], out
    means = {row[0]: float(row[1]) for row in table}
    for name, between, around, inside, plain, beyond in split:
        assert abs(int(between) + int(around) + int(inside) - 1000 * means[name]) <= 10, out
        assert abs(int(inside) - int(plain) - int(beyond)) <= 1, out
    callbacks = re.search(
        r"^- xfmr-train, default callbacks and logging \(\+ progress bar\): (.+)$", out, re.M
    )
    assert all(name in callbacks[1] for name in ("ModelCheckpoint", "StepProgressBar")), out
