"""benchmarks/experiment_positions.py end to end in quick mode: six schemes x two seeds, the
comparison against learned positions, the evaluations at 1x, 2x and 4x the trained block, and
a second call that reuses the finished runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from helpers.experiment_scripts import is_png, run_quick, tables

SCHEMES = {"learned", "sinusoidal", "relative", "rotary", "alibi", "none"}


@pytest.mark.slow
def test_the_positions_page_is_written_from_its_runs(tmp_path: Path) -> None:
    result = run_quick("experiment_positions.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "positions.md").read_text()
    assert "Quick mode" in page and "## Machine and time" in page
    compared, lengths = tables(page, "pos")
    assert {row[0] for row in compared} == SCHEMES and len(compared) == 6
    for pos, n, loss, delta, test, p_holm, significant, *_ in compared:
        assert n == "2", (pos, n)
        mean, low, high = (float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", loss).groups())
        assert low < mean < high and 0 < mean < math.log(30), loss
        if pos == "learned":
            assert (delta, test, p_holm, significant) == ("-", "-", "-", "baseline")
        else:  # every scheme ran the seeds learned ran: paired
            assert test == "paired (n=2)", (pos, test)
            assert 0 <= float(p_holm) <= 1 and significant in ("yes", "no"), (pos, p_holm)

    # 1x, 2x, 4x and the 4x split; learned positions run only at the length they trained on.
    rows = {row[0]: row[1:] for row in lengths}
    assert rows["learned"][0] != "refused" and set(rows["learned"][1:]) == {"refused"}
    for pos in SCHEMES - {"learned"}:
        assert "refused" not in rows[pos], (pos, rows[pos])
    # Each cell is the mean over seeds of what xfmr-eval wrote for each run.
    for pos, times in (("rotary", 1), ("alibi", 4), ("none", 2)):
        reports = [json.loads((tmp_path / "runs" / f"{pos}-seed{s}" / f"eval-{16 * times}.json")
                   .read_text()) for s in (1, 2)]  # fmt: skip
        assert all(r["by_position"]["block_size"] == 16 * times for r in reports)
        shown = float(rows[pos][[1, 2, 4].index(times)].split(" ± ")[0])
        assert shown == pytest.approx(sum(r["loss"] for r in reports) / 2, abs=6e-4), pos
    assert "longer than the 16 learned positions" in page
    assert is_png(tmp_path / "page" / "positions" / "curves.png")
    assert is_png(tmp_path / "page" / "positions" / "by_position.png")

    results = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(results) == 12
    written = {path: path.stat().st_mtime_ns for path in results}
    again = run_quick("experiment_positions.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed" not in again.stdout, again.stdout  # no run trained again
    assert {path: path.stat().st_mtime_ns for path in results} == written
    assert tables((tmp_path / "page" / "positions.md").read_text(), "pos")[0] == compared
