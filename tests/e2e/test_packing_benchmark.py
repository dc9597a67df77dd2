"""benchmarks/packing.py on tiny SST-2 and Multi30k files of sentences of many lengths, at
size=tiny for a few steps: the table has every row for both, packing leaves less padding on
every side in fewer rows, and both settings trained on the same real tokens. The figures in
docs/data.md need a full run on the real data."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

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
    tmp_path: Path,
) -> None:
    _write_data(tmp_path / "data")
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "packing.py"),
        f"--data-dir={tmp_path / 'data'}",
        "--steps=3",
        "--warmup=1",
        "--size=tiny",
        f"--out={tmp_path / 'out'}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    shares = {
        (data, side): (float(a), float(b)) for data, side, a, b in SHARE.findall(result.stdout)
    }
    assert shares.keys() == {("SST-2", "sentence"), ("Multi30k", "source"), ("Multi30k", "target")}
    assert all(packed < unpacked for unpacked, packed in shares.values()), result.stdout
    rows = {data: (float(a), float(b)) for data, a, b in ROWS.findall(result.stdout)}
    assert rows.keys() == {"SST-2", "Multi30k"}
    assert all(packed < unpacked for unpacked, packed in rows.values()), result.stdout
    assert len(SPEED.findall(result.stdout)) == 2, result.stdout
    assert result.stdout.count("(same: True)") == 2, result.stdout
