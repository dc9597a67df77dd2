"""benchmarks/experiment_attention.py end to end in quick mode: one run, every head drawn and
measured, each measure beside even attention's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.experiment_scripts import is_png, run_quick, tables


@pytest.mark.slow
def test_the_attention_page_measures_every_head(tmp_path: Path) -> None:
    result = run_quick("experiment_attention.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "attention.md").read_text()
    assert "Quick mode" in page and "## What it shows" in page
    [rows] = tables(page, "head")
    # size=tiny: 2 blocks x 2 heads, then even attention over a 16-token causal window.
    assert [row[0] for row in rows] == [
        "block 0 head 0", "block 0 head 1", "block 1 head 0", "block 1 head 1", "even attention"
    ]  # fmt: skip
    for row in rows:
        fractions, (distance, entropy) = [float(v) for v in row[2:7]], map(float, row[7:9])
        assert all(0 <= f <= 1 for f in fractions), row
        assert 0 <= distance <= 15 and 0 <= entropy <= 2.8, row  # ln 16 = 2.77
    self_, previous, first, _, _, distance, entropy = map(float, rows[-1][2:9])
    # Even over t + 1 keys, averaged over queries t = 1..15: (H_16 - 1) / 15 on each of them.
    harmonic = sum(1 / (t + 1) for t in range(1, 16)) / 15
    assert self_ == previous == first == pytest.approx(harmonic, abs=1e-3)
    assert distance == pytest.approx(sum(t / 2 for t in range(1, 16)) / 15, abs=1e-3)
    measures = "self|previous token|first token|word start|same character"
    for row in rows[:-1]:
        assert re.fullmatch(rf"(?:(?:{measures}), )*(?:local|mid-range|broad)", row[1]), row
        evens = {"self": self_, "previous token": previous, "first token": first}
        for column, (name, even) in enumerate(evens.items(), start=2):
            lift = float(row[column]) - even  # named exactly when 0.1 above even attention
            assert (name in row[1]) == (lift >= 0.1) or abs(lift - 0.1) < 2e-3, (row, name)
    assert is_png(tmp_path / "page" / "attention" / "heads.png")
