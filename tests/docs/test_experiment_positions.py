"""benchmarks/experiment_positions.py: its measure of carrying past the trained length, and the
script end to end in quick mode: six schemes x two seeds, the paired comparison against learned
positions, the evaluations at 1x, 2x and 4x the trained block, the late-versus-past test, and a
second call that reuses the finished runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import ModuleType

import pytest

from helpers.experiment_scripts import benchmark_script, is_png, run_quick, tables

SCHEMES = {"learned", "sinusoidal", "relative", "rotary", "alibi", "none"}
VERDICTS = re.compile(r"different|different, but within ±0\.05|equivalent within ±0\.05|"
                      r"inconclusive \(neither\)")  # fmt: skip


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return benchmark_script("experiment_positions")


def test_carrying_is_measured_against_late_positions_not_the_first(script: ModuleType) -> None:
    # A curve whose first positions, with little context, have a high loss, and which is flat
    # from the middle of the trained block of 64 to the end of a 256-token window: it carries.
    flat = [(2.0 + 3.0 * math.exp(-t / 4), 100) for t in range(256)]
    late, past = script.late_and_past(flat, 64)
    assert late == pytest.approx(2.0, abs=1e-4) and past == pytest.approx(2.0, abs=1e-4)
    assert past - late == pytest.approx(0.0, abs=1e-4)
    # Against every position before 64 (the early ones among them), it would look better past.
    assert past - script._span(flat, 0, 64) < -0.1
    # A curve that rises by 0.5 past the trained length does not carry.
    rising = [(loss + (0.5 if t >= 64 else 0.0), n) for t, (loss, n) in enumerate(flat)]
    late, past = script.late_and_past(rising, 64)
    assert past - late == pytest.approx(0.5, abs=1e-4)
    # Positions are weighted by their targets.
    weighted = [(1.0, 1)] * 48 + [(2.0, 3), (4.0, 1)] + [(1.0, 1)] * 14 + [(3.0, 2)] * 10
    late, past = script.late_and_past(weighted, 64)
    assert late == pytest.approx((2 * 3 + 4 + 14) / 18) and past == pytest.approx(3.0)


@pytest.mark.slow
def test_the_positions_page_is_written_from_its_runs(tmp_path: Path, script: ModuleType) -> None:
    result = run_quick("experiment_positions.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "positions.md").read_text()
    assert "Quick mode" in page and "## Scope" in page and "## Machine and time" in page
    assert "Welch" not in page and "paired" in page
    compared, lengths, carried = tables(page, "pos")
    assert {row[0] for row in compared} == SCHEMES and len(compared) == 6
    for pos, n, loss, delta, test, p, p_equivalent, verdict in compared:
        assert n == "2", (pos, n)
        mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", loss).groups())
        assert low < mean < high and 0 < mean < math.log(30), loss
        if pos == "learned":
            assert {delta, test, p, p_equivalent, verdict} == {"-"}
        else:  # every scheme ran the seeds learned ran: paired
            assert test == "paired (n=2)", (pos, test)
            _check_difference(delta, p, p_equivalent, verdict)

    # 1x, 2x, 4x and the 4x split; learned positions run only at the length they trained on.
    rows = {row[0]: row[1:] for row in lengths}
    assert rows["learned"][0] != "refused" and set(rows["learned"][1:]) == {"refused"}
    for pos in SCHEMES - {"learned"}:
        assert "refused" not in rows[pos], (pos, rows[pos])
    # Each cell is the mean over seeds of what xfmr-eval wrote for each run.
    for pos, times in (("rotary", 1), ("alibi", 4), ("none", 2)):
        reports = [_report(tmp_path, pos, seed, 16 * times) for seed in (1, 2)]
        assert all(r["by_position"]["block_size"] == 16 * times for r in reports)
        shown = float(rows[pos][[1, 2, 4].index(times)].split(" ± ")[0])
        assert shown == pytest.approx(sum(r["loss"] for r in reports) / 2, abs=6e-4), pos

    # Past minus late, per seed from the 4x evaluations' by-position curves, then over seeds.
    assert {row[0] for row in carried} == SCHEMES - {"learned"}
    for pos, n, delta, test, p, p_equivalent, verdict in carried:
        assert (n, test) == ("2", "paired (n=2)"), (pos, n, test)
        _check_difference(delta, p, p_equivalent, verdict)
        per_seed = []
        for seed in (1, 2):
            csv_path = Path(_report(tmp_path, pos, seed, 64)["by_position"]["csv"])
            late, past = script.late_and_past(script._by_position(csv_path), 16)
            per_seed.append(past - late)
        assert float(delta.split(" ")[0]) == pytest.approx(sum(per_seed) / 2, abs=6e-4), pos

    assert "longer than the 16 learned positions" in page
    assert "each seed faint" in page and "each run a faint line" in page
    assert is_png(tmp_path / "page" / "positions" / "curves.png")
    assert is_png(tmp_path / "page" / "positions" / "by_position.png")

    results = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(results) == 12
    written = {path: path.stat().st_mtime_ns for path in results}
    again = run_quick("experiment_positions.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed" not in again.stdout, again.stdout  # no run trained again
    assert {path: path.stat().st_mtime_ns for path in results} == written
    assert tables((tmp_path / "page" / "positions.md").read_text(), "pos") == [
        compared, lengths, carried]  # fmt: skip


def _report(tmp_path: Path, pos: str, seed: int, length: int) -> dict:
    return json.loads((tmp_path / "runs" / f"{pos}-seed{seed}" / f"eval-{length}.json").read_text())


def _check_difference(delta: str, p: str, p_equivalent: str, verdict: str) -> None:
    """'Δ [low, high]' with Δ inside, corrected p-values in [0, 1], a verdict that agrees
    with them: significant exactly where the simultaneous interval leaves out 0."""
    mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", delta).groups())
    assert low <= mean <= high, delta
    assert 0 <= float(p) <= 1 and 0 <= float(p_equivalent) <= 1, (p, p_equivalent)
    assert VERDICTS.fullmatch(verdict), verdict
    assert verdict.startswith("different") == (float(p) < 0.05), (delta, p, verdict)
    if float(p) < 0.05:  # as shown, to three decimals: an end may round to 0
        assert low >= 0 or high <= 0, (delta, p)
    else:
        assert low <= 0 <= high, (delta, p)
