"""benchmarks/experiment_scaling.py end to end in quick mode: three schemes x three sizes x two
seeds, each run's compute and final loss, the power law per scheme and the gaps to learned
positions, every figure checked against the runs' own results.json with numpy and scipy, and a
second call that reuses the finished runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers.experiment_scripts import is_png, run_quick, tables

SCHEMES = ("learned", "rotary", "alibi")
SIZES = ((16, 1), (24, 1), (32, 2))  # quick mode's
SEEDS = (1, 2)
TRAINED_LINE = re.compile(r"^  \S+-seed\d: completed, ", re.MULTILINE)
SPAN = r"([-+]?[\d.]+) \[([-+]?[\d.]+), ([-+]?[\d.]+)\]"  # mean [low, high]


def numbers(cell: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.fullmatch(SPAN + r"(?: \(n=\d+\))?", cell).groups())


def compute(result: dict) -> float:
    """C from what the run itself recorded: its FLOPs per token (the MFU count) times the
    tokens of its steps."""
    return result["flops_per_token"] * result["step"] * result["tokens_per_step"]


@pytest.mark.slow
def test_the_scaling_page_is_written_from_its_runs(tmp_path: Path) -> None:
    first = run_quick("experiment_scaling.py", tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    names = {f"{pos}-d{d}-l{n}-seed{s}": (pos, (d, n)) for pos in SCHEMES for d, n in SIZES
             for s in SEEDS}  # fmt: skip
    runs = tmp_path / "runs"
    assert {d.name for d in runs.iterdir()} == set(names)
    assert len(TRAINED_LINE.findall(first.stdout)) == len(names), first.stdout
    results = {name: json.loads((runs / name / "results.json").read_text()) for name in names}
    of = {key: [results[n] for n, k in names.items() if k == key]
          for key in {k for k in names.values()}}  # fmt: skip

    page = (tmp_path / "page" / "scaling.md").read_text()
    assert "Quick mode" in page and "## Machine and time" in page and "## What it shows" in page
    models, by_size = tables(page, "d_model")
    for row, (d, n) in zip(models, SIZES, strict=True):
        own = [r for pos in SCHEMES for r in of[(pos, (d, n))]]
        assert row[:3] == [str(d), str(n), str(d // 8)]
        assert row[3] == " / ".join(str(of[(pos, (d, n))][0]["n_parameters"]) for pos in SCHEMES)
        assert len({r["flops_per_token"] for r in own}) == 1  # positions cost no FLOPs
        assert float(row[4]) == pytest.approx(own[0]["flops_per_token"], rel=5e-3)
        assert int(row[5]) == own[0]["step"] * own[0]["tokens_per_step"] == 20 * 4 * 16
        assert float(row[6]) == pytest.approx(compute(own[0]), rel=5e-3)

    # Each cell: the mean of the runs' final val/loss with its t interval, and Welch's
    # difference to learned positions.
    for row, size in zip(by_size, SIZES, strict=True):
        finals = {pos: [r["metrics"]["val/loss"] for r in of[(pos, size)]] for pos in SCHEMES}
        for pos, cell in zip(SCHEMES, row[3:6], strict=True):
            low, high = stats.t.interval(0.95, 1, loc=np.mean(finals[pos]),
                                         scale=stats.sem(finals[pos]))  # fmt: skip
            assert numbers(cell) == pytest.approx((np.mean(finals[pos]), low, high), abs=6e-4)
        for pos, cell in zip(SCHEMES[1:], row[6:], strict=True):
            test = stats.ttest_ind(finals[pos], finals["learned"], equal_var=False)
            expected = test.confidence_interval(0.95)
            delta = np.mean(finals[pos]) - np.mean(finals["learned"])
            assert numbers(cell) == pytest.approx((delta, expected.low, expected.high), abs=6e-4)

    # The power law per scheme is numpy's line through (log C, log L) of every run, its
    # interval scipy's; the difference of exponents uses the two slopes' standard errors.
    [laws] = tables(page, "pos")
    lines, p_values = {}, []
    for row, pos in zip(laws, SCHEMES, strict=True):
        own = [r for size in SIZES for r in of[(pos, size)]]
        x = np.log([compute(r) for r in own])
        y = np.log([r["metrics"]["val/loss"] for r in own])
        slope, intercept = np.polyfit(x, y, 1)
        lines[pos] = line = stats.linregress(x, y)
        t = stats.t.ppf(0.975, len(own) - 2)
        assert row[:2] == [pos, str(len(own))]
        assert numbers(row[3]) == pytest.approx(
            (-slope, -slope - t * line.stderr, -slope + t * line.stderr), abs=2e-4
        )
        assert float(row[2].split()[0]) == pytest.approx(math.exp(intercept), rel=5e-3)
        assert float(row[4]) == pytest.approx(line.rvalue**2, abs=1e-3)
        if pos == "learned":
            assert row[5:] == ["-", "-", "-"]
            continue
        var, base = line.stderr**2, lines["learned"].stderr ** 2
        df = (var + base) ** 2 / (var**2 / (len(own) - 2) + base**2 / (len(own) - 2))
        delta = lines["learned"].slope - line.slope
        half = stats.t.ppf(0.975, df) * math.sqrt(var + base)
        assert numbers(row[5]) == pytest.approx((delta, delta - half, delta + half), abs=2e-4)
        assert float(row[6]) == pytest.approx(
            2 * stats.t.sf(abs(delta) / math.sqrt(var + base), df), rel=5e-3
        )
        p_values.append((float(row[6]), float(row[7])))
        shown = delta - half <= 0 <= delta + half
        verdict = f"whether {pos}'s gap to learned grows or shrinks with compute is not shown"
        assert (verdict in page) == shown, page
        assert (f"{pos}'s loss falls faster" in page) == (not shown and delta > 0), page
    (low, low_holm), (high, high_holm) = sorted(p_values)  # Holm over the two comparisons
    assert low_holm == pytest.approx(min(1, 2 * low), rel=5e-3)
    assert high_holm == pytest.approx(max(min(1, 2 * low), high), rel=5e-3)
    assert is_png(tmp_path / "page" / "scaling" / "loss_by_compute.png")
    assert "](scaling/loss_by_compute.png)" in page

    # A second call finds every run finished and trains none of them again.
    written = {n: (runs / n / "results.json").stat().st_mtime_ns for n in names}
    again = run_quick("experiment_scaling.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not TRAINED_LINE.search(again.stdout), again.stdout
    assert {n: (runs / n / "results.json").stat().st_mtime_ns for n in names} == written
    assert tables((tmp_path / "page" / "scaling.md").read_text(), "pos")[0] == laws
