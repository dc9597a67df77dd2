"""benchmarks/experiment_width_transfer.py: the best learning rate and its bootstrap over seeds
worked out by hand on made-up losses; and the script end to end in quick mode (two widths,
two learning rates, both parametrizations, two seeds), µP at its base width equal to SP, and
a second call that reuses the finished runs."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.experiment_scripts import benchmark_script, is_png, run_quick, tables

# Made-up final losses, seeds 1-3: (width, log2 lr) -> per seed; None a run that failed.
LOSSES = {
    (32, -3): (3.0, 3.0, 3.0), (32, -2): (2.0, 2.0, 2.9), (32, -1): (2.5, 2.5, 2.5),
    (64, -3): (2.0, 2.0, 2.0), (64, -2): (2.2, 2.2, 2.2), (64, -1): (None, 2.0, 2.0),
}  # fmt: skip


def _sweep():
    sweep = benchmark_script("width_transfer.sweep")
    runs = {}
    for (width, exponent), losses in LOSSES.items():
        for seed, loss in enumerate(losses, start=1):
            status = "failed" if loss is None else "completed"
            runs[("sp", width, exponent, seed)] = SimpleNamespace(
                status=status, metrics={} if loss is None else {"val/loss": loss}
            )
    return sweep.Sweep.of(runs, (32, 64), (-3, -2, -1))


def test_the_best_learning_rate_and_its_bootstrap_are_worked_out_by_hand() -> None:
    sweep = _sweep()
    assert sweep.seeds == (1, 2, 3) and not sweep.missing
    assert sweep.values("sp", 64, -1)[0] == math.inf  # a failed run is worse than any
    # d 32: means 3.0, 2.3, 2.5, so 2^-2. A resample beats it with 2^-1 where seed 3 is drawn
    # twice or more ((2 + 2 + 2.9 c) / 3 > 2.5 needs c >= 2): 3 x 2 + 1 = 7 of the 27.
    assert sweep.best("sp", 32) == -2
    spread = sweep.best_spread("sp", 32)
    assert len(spread.found) == 27
    assert spread.share(-2) == pytest.approx(20 / 27) and spread.share(-1) == pytest.approx(7 / 27)
    assert spread.interval() == (-2, -1)
    # d 64: 2^-3 in every resample (2^-1 ties it without seed 1; a tie goes to the smaller lr).
    assert sweep.best_spread("sp", 64).share(-3) == 1
    assert sorted(sweep.shift_spread("sp", 64).found) == [-2] * 7 + [-1] * 20
    # Carrying d 32's best to d 64: 2^-2 costs 0.2 (20 resamples); 2^-1 costs inf where seed
    # 1's failed run is drawn (the 3 of the 7 whose other seed is 1), else 0.
    regret = sorted(sweep.regret_spread("sp").found)
    assert regret[:4] == [0.0] * 4 and regret[4:24] == pytest.approx([0.2] * 20)
    assert regret[24:] == [math.inf] * 3


def test_a_partial_study_uses_the_seeds_every_setting_has() -> None:
    module = benchmark_script("width_transfer.sweep")
    runs = {("sp", 32, e, s): SimpleNamespace(status="completed", metrics={"val/loss": 2.0 + e})
            for e in (-2, -1) for s in (1, 2)}  # fmt: skip
    runs[("sp", 32, -1, 2)] = None  # not trained yet
    sweep = module.Sweep.of(runs, (32,), (-2, -1))
    assert sweep.seeds == (1,) and sweep.missing == ((("sp", 32, -1), 2),)
    assert sweep.best("sp", 32) == -2


def _ends(interval: str) -> tuple[int, int]:
    low, high = re.fullmatch(r"\[(\S+), (\S+)\]", interval).groups()
    return int(low), int(high)


@pytest.mark.slow
def test_the_width_transfer_page_is_written_from_its_runs(tmp_path: Path) -> None:
    result = run_quick("experiment_width_transfer.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "width-transfer.md").read_text()
    assert "Quick mode" in page and "## Scope" in page and "## Machine and time" in page
    assert "Partial" not in page
    # µP at its base width (the narrowest) is SP: the same losses, to the last digit.
    assert "differ by at most 0.0e+00 over 4 pairs of runs" in page  # 2 lrs x 2 seeds
    (sweep,) = tables(page, "parametrization")[:1]
    assert [row[:2] for row in sweep] == [["SP", "8"], ["SP", "16"], ["µP", "8"], ["µP", "16"]]
    assert sweep[0][2:] == sweep[2][2:]  # the base width's rows, one under each
    for row in sweep:
        assert sum(cell.startswith("**") for cell in row[2:]) == 1, row
    best = tables(page, "parametrization")[1]
    narrowest = {par: int(exponent) for par, width, exponent, *_ in best if width == "8"}
    for par, width, exponent, lr, interval, share, loss, moved, moved_interval in best:
        low, high = _ends(interval)
        assert low <= int(exponent) <= high
        assert float(lr) == pytest.approx(2.0 ** int(exponent), rel=0.01)
        assert 0 < float(share.rstrip("%")) <= 100 and math.isfinite(float(loss))
        assert int(moved) == int(exponent) - narrowest[par], (par, width)
        low, high = _ends(moved_interval)
        assert low <= int(moved) <= high
    (transfer,) = tables(page, "comparison")
    assert [row[0] for row in transfer][:2] == ["SP: transferred - best", "µP: transferred - best"]
    assert is_png(tmp_path / "page" / "width-transfer" / "sweep.png")

    results = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(results) == 16  # 2 widths x 2 learning rates x 2 parametrizations x 2 seeds
    written = {path: path.stat().st_mtime_ns for path in results}
    again = run_quick("experiment_width_transfer.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed" not in again.stdout, again.stdout  # no run trained again
    assert {path: path.stat().st_mtime_ns for path in results} == written
