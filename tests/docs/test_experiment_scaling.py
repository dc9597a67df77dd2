"""benchmarks/experiment_scaling.py end to end in quick mode: three schemes x four sizes x two
budgets x two seeds, each run's compute and final loss, the paired differences to learned
positions with the page's Bonferroni family recomputed by scipy, the laws given only where their
lack-of-fit test passes, and a second call that reuses the finished runs."""

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
SIZES = ((8, 1), (16, 1), (16, 2), (24, 2))  # quick mode's
BUDGETS = (20, 30)  # quick mode's steps
SEEDS = (1, 2)
TRAINED_LINE = re.compile(r"^  \S+-seed\d: completed, ", re.MULTILINE)
SPAN = r"([-+]?[\d.]+) \[([-+]?[\d.]+), ([-+]?[\d.]+)\]"  # mean [low, high]


def numbers(cell: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.fullmatch(SPAN + r"(?: \(n=\d+\))?", cell).groups())


def compute(result: dict) -> float:
    """C from what the run itself recorded: its FLOPs per token (the MFU count) times the
    tokens of its steps."""
    return result["flops_per_token"] * result["step"] * result["tokens_per_step"]


def tost_p(differences: list[float], margin: float) -> float:
    """Schuirmann's two one-sided paired t-tests, written out here."""
    n, mean = len(differences), float(np.mean(differences))
    se = float(np.std(differences, ddof=1)) / math.sqrt(n)
    return max(stats.t.sf((mean + margin) / se, n - 1), stats.t.cdf((mean - margin) / se, n - 1))


@pytest.mark.slow
def test_the_scaling_page_is_written_from_its_runs(tmp_path: Path) -> None:
    first = run_quick("experiment_scaling.py", tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    names = {f"{pos}-d{d}-l{n}-s{steps}-seed{s}": (pos, (d, n), steps) for pos in SCHEMES
             for d, n in SIZES for steps in BUDGETS for s in SEEDS}  # fmt: skip
    runs = tmp_path / "runs"
    assert {d.name for d in runs.iterdir()} == set(names)
    assert len(TRAINED_LINE.findall(first.stdout)) == len(names), first.stdout
    results = {name: json.loads((runs / name / "results.json").read_text()) for name in names}
    of = {key: [results[n] for n, k in names.items() if k == key] for key in set(names.values())}
    finals = {key: [results[f"{key[0]}-d{key[1][0]}-l{key[1][1]}-s{key[2]}-seed{s}"]["metrics"]
                    ["val/loss"] for s in SEEDS] for key in of}  # fmt: skip

    page = (tmp_path / "page" / "scaling.md").read_text()
    assert "Quick mode" in page and "## Machine and time" in page and "## What it shows" in page
    assert "\n**Tests:** paired t-tests by seed" in page
    models, by_setting, rotary, alibi = tables(page, "d_model")
    for row, (d, n) in zip(models, SIZES, strict=True):
        own = [r for pos in SCHEMES for steps in BUDGETS for r in of[(pos, (d, n), steps)]]
        assert row[:3] == [str(d), str(n), str(d // 8)]
        assert row[3] == " / ".join(
            str(of[(pos, (d, n), BUDGETS[0])][0]["n_parameters"]) for pos in SCHEMES
        )
        assert len({r["flops_per_token"] for r in own}) == 1  # positions cost no FLOPs
        assert float(row[4]) == pytest.approx(own[0]["flops_per_token"], rel=5e-3)
        for cell, steps in zip(row[5:], BUDGETS, strict=True):
            assert float(cell) == pytest.approx(
                compute(of[("learned", (d, n), steps)][0]), rel=5e-3
            )

    settings = [(size, steps) for steps in BUDGETS for size in SIZES]
    for row, (size, steps) in zip(by_setting, settings, strict=True):
        assert row[:3] == [str(size[0]), str(size[1]), str(steps)]
        for pos, cell in zip(SCHEMES, row[4:], strict=True):
            values = finals[(pos, size, steps)]
            low, high = stats.t.interval(0.95, 1, loc=np.mean(values), scale=stats.sem(values))
            assert numbers(cell) == pytest.approx((np.mean(values), low, high), abs=6e-4)

    # The family: every paired difference and its TOST, plus any exponent differences, all
    # Bonferroni-corrected together; each interval at 1 - 0.05 / m.
    count = int(re.search(r"differences: (\d+) p-values", page).group(1))
    level = 1 - 0.05 / count
    assert float(re.search(r"interval at (0\.\d+)", page).group(1)) == pytest.approx(
        level, abs=1e-5
    )
    for pos, table in (("rotary", rotary), ("alibi", alibi)):
        for row, (size, steps) in zip(table, settings, strict=True):
            differences = np.subtract(finals[(pos, size, steps)], finals[("learned", size, steps)])
            test = stats.ttest_1samp(differences, 0.0)
            interval = test.confidence_interval(level)
            assert numbers(row[4]) == pytest.approx(
                (differences.mean(), interval.low, interval.high), abs=6e-4)  # fmt: skip
            assert row[5] == "paired (n=2)"
            assert float(row[6]) == pytest.approx(min(1.0, count * test.pvalue), rel=5e-3)
            assert float(row[7]) == pytest.approx(min(1.0, count * tost_p(differences, 0.05)),
                                                  rel=5e-3)  # fmt: skip

    # A law's exponent is given exactly where its lack-of-fit test does not reject it.
    laws, exponents = tables(page, "pos")
    assert [(row[0], row[1]) for row in laws] == [
        (pos, steps) for pos in SCHEMES for steps in (*map(str, BUDGETS), "both")]  # fmt: skip
    for row in laws:
        assert row[2] == ("8" if row[1] == "both" else "4")
        found = re.search(r"p = ([\d.e+-]+)$", row[6])
        rejected = found is not None and float(found.group(1)) < 0.05
        assert (row[5] == "not given: the law is rejected") == rejected, row
    assert [(row[0], row[1]) for row in exponents] == [
        (pos, str(steps)) for pos in SCHEMES[1:] for steps in BUDGETS]  # fmt: skip
    assert is_png(tmp_path / "page" / "scaling" / "loss_by_compute.png")
    assert "](scaling/loss_by_compute.png)" in page

    # A second call finds every run finished and trains none of them again.
    written = {n: (runs / n / "results.json").stat().st_mtime_ns for n in names}
    again = run_quick("experiment_scaling.py", tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not TRAINED_LINE.search(again.stdout), again.stdout
    assert {n: (runs / n / "results.json").stat().st_mtime_ns for n in names} == written
    assert tables((tmp_path / "page" / "scaling.md").read_text(), "pos")[0] == laws
