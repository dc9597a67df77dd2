"""benchmarks/experiment_attention.py end to end in quick mode: one run, every head drawn and
measured, each measure beside even attention's."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiment_scripts import is_png, run_quick, tables


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
    # Even over t + 1 keys, averaged over queries t = 1..15: H_16 - 1 on each of them.
    harmonic = sum(1 / (t + 1) for t in range(1, 16)) / 15
    assert self_ == previous == first == pytest.approx(harmonic, abs=1e-3)
    assert distance == pytest.approx(sum(t / 2 for t in range(1, 16)) / 15, abs=1e-3)
    assert rows[0][1] in ("self", "previous token", "first token", "word start",
                          "same character", "broad", "local")  # fmt: skip
    assert is_png(tmp_path / "page" / "attention" / "heads.png")
