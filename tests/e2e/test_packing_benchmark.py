"""benchmarks/packing.py on tiny SST-2 and Multi30k files of sentences of many lengths, at
size=tiny for a few steps: the table has every row for both, packing leaves less padding on
every side in fewer rows, and both settings trained on the same real tokens. The figures in
docs/data.md need a full run on the real data.

The script's `main` runs in the test's process (it counts the padding in-process anyway); each
timed run is still the real xfmr-train in a process of its own with the script's command and
environment, only forked from the tests' server with the imports done
(helpers/experiment_scripts.py `run_quietly`) rather than from a new interpreter: the script
times the runs' steps, not Python's start-up."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest
import torch

from helpers.experiment_scripts import script_in_process

WORDS = "the a cat dog film warm cold bird sees runs over stone house river tree fine dull".split()
SHARE = re.compile(
    r"^\| (SST-2|Multi30k) \| padding share, (\w+) \| ([\d.]+)% \| ([\d.]+)% \|$", re.M
)
ROWS = re.compile(r"^\| (SST-2|Multi30k) \| rows per batch \| ([\d.]+) \| ([\d.]+) \|$", re.M)
SPEED = re.compile(r"^\| (SST-2|Multi30k) \| real tokens/s \| [\d,]+ \| [\d,]+ \|$", re.M)


def _write_data(root: Path) -> None:
    """sst2/{train,dev}.tsv and multi30k/{train,val}.{de,en}: sentences of 2 to 20 words."""
    rng = random.Random(0)

    def sentence() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 20)))

    (root / "sst2").mkdir(parents=True)
    for split, n in (("train", 70), ("dev", 8)):
        rows = "".join(f"{sentence()}\t{rng.randint(0, 1)}\n" for _ in range(n))
        (root / "sst2" / f"{split}.tsv").write_text("sentence\tlabel\n" + rows)
    (root / "multi30k").mkdir()
    for split, n in (("train", 130), ("val", 8)):
        pairs = [(sentence(), sentence()) for _ in range(n)]
        (root / "multi30k" / f"{split}.de").write_text("".join(de + "\n" for de, _ in pairs))
        (root / "multi30k" / f"{split}.en").write_text("".join(en + "\n" for _, en in pairs))


@pytest.mark.slow
def test_the_packing_benchmark_prints_less_padding_in_fewer_rows_on_the_same_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_data(tmp_path / "data")
    packing = script_in_process("packing", monkeypatch)
    monkeypatch.setattr(sys, "argv", [
        "packing.py",
        f"--data-dir={tmp_path / 'data'}",
        "--steps=3",
        "--warmup=1",
        "--size=tiny",
        f"--out={tmp_path / 'out'}",
    ])  # fmt: skip
    threads = torch.get_num_threads()
    try:
        packing.main()  # --threads 1: the timed runs' threads, and this process's
    finally:
        torch.set_num_threads(threads)
    stdout = capsys.readouterr().out
    shares = {(data, side): (float(a), float(b)) for data, side, a, b in SHARE.findall(stdout)}
    assert shares.keys() == {("SST-2", "sentence"), ("Multi30k", "source"), ("Multi30k", "target")}
    assert all(packed < unpacked for unpacked, packed in shares.values()), stdout
    rows = {data: (float(a), float(b)) for data, a, b in ROWS.findall(stdout)}
    assert rows.keys() == {"SST-2", "Multi30k"}
    assert all(packed < unpacked for unpacked, packed in rows.values()), stdout
    assert len(SPEED.findall(stdout)) == 2, stdout
    assert stdout.count("(same: True)") == 2, stdout
