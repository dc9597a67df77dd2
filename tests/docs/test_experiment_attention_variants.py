"""benchmarks/experiment_attention_variants.py end to end in quick mode: five settings x two
seeds, each variant paired with full attention by seed, the KV cache's bytes per token against
sizes worked out by hand, and a second call that reuses the finished runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.experiment_scripts import is_png, run_quick, tables

SETTINGS = {"mha", "gqa2", "gqa1", "window8", "window2"}  # quick mode: block 32, windows 8 and 2
VERDICTS = re.compile(r"different|different, but within ±0\.05|equivalent within ±0\.05|"
                      r"inconclusive \(neither\)")  # fmt: skip
# The tiny model: 2 layers, d 64, 4 heads of 16; per position a full layer with k key/value
# heads holds 2 (keys, values) x k x 16 x 4 bytes. Bytes per token after 32 and 128 tokens:
# full layers hold every position, a window of w its last w - 1.
CACHE = {"mha": (1024, 1024), "gqa2": (512, 512), "gqa1": (256, 256),
         "window8": (7 * 1024 / 32, 7 * 1024 / 128), "window2": (1024 / 32, 1024 / 128)}  # fmt: skip


@pytest.mark.slow
def test_the_attention_variants_page_is_written_from_its_runs(tmp_path: Path) -> None:
    result = run_quick("experiment_attention_variants.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "attention-variants.md").read_text()
    assert "Quick mode" in page and "## Scope" in page and "## Machine and time" in page
    assert "Welch" not in page and "paired" in page
    compared, cache = tables(page, "setting")
    assert {row[0] for row in compared} == SETTINGS and len(compared) == 5
    for name, kv_heads, window, n, loss, delta, test, p, p_equivalent, verdict, _ in compared:
        assert n == "2", (name, n)
        assert (kv_heads, window) == _shape(name), name
        mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", loss).groups())
        assert low < mean < high, loss
        if name == "mha":
            assert {delta, test, p, p_equivalent, verdict} == {"-"}
        else:
            assert test == "paired (n=2)", (name, test)
            _check_difference(delta, p, p_equivalent, verdict)

    for name, kv_heads, window, short, long, share, *formula in cache:
        assert (kv_heads, window) == _shape(name), name
        measured = (float(short.replace(",", "")), float(long.replace(",", "")))
        assert measured == pytest.approx(CACHE[name], abs=0.5), name
        assert [float(f.replace(",", "")) for f in formula] == pytest.approx(CACHE[name], abs=0.5)
        assert float(share.rstrip("%")) == pytest.approx(100 * CACHE[name][1] / 1024, abs=0.05)
    assert "Every measured size equals the formula" in page
    assert is_png(tmp_path / "page" / "attention-variants" / "curves.png")
    assert is_png(tmp_path / "page" / "attention-variants" / "cache.png")

    results = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(results) == 10
    written = {path: path.stat().st_mtime_ns for path in results}
    again = run_quick("experiment_attention_variants.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed" not in again.stdout, again.stdout  # no run trained again
    assert {path: path.stat().st_mtime_ns for path in results} == written
    assert tables((tmp_path / "page" / "attention-variants.md").read_text(), "setting") == [
        compared, cache]  # fmt: skip


def _shape(name: str) -> tuple[str, str]:
    """(n_kv_heads, window) as the tables show a setting of the tiny model's 4 heads."""
    if name.startswith("gqa"):
        return name.removeprefix("gqa"), "all"
    return "4", name.removeprefix("window") if name.startswith("window") else "all"


def _check_difference(delta: str, p: str, p_equivalent: str, verdict: str) -> None:
    """'Δ [low, high]' with Δ inside, corrected p-values in [0, 1], a verdict that agrees
    with them: significant exactly where the simultaneous interval leaves out 0."""
    mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", delta).groups())
    assert low <= mean <= high, delta
    assert 0 <= float(p) <= 1 and 0 <= float(p_equivalent) <= 1, (p, p_equivalent)
    assert VERDICTS.fullmatch(verdict), verdict
    assert verdict.startswith("different") == (float(p) < 0.05), (delta, p, verdict)
    if float(p) < 0.05:
        assert low >= 0 or high <= 0, (delta, p)
    else:
        assert low <= 0 <= high, (delta, p)
