"""benchmarks/experiment_layernorm.py end to end in quick mode, on made-up words the test writes:
every run of the grid is trained and named for its setting, the page has its sections and a
row with finite numbers for every placement, learning rate and warm-up, its divergence counts
agree with the runs' own results.json, the figure is a PNG, and a second call reuses the runs."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from helpers.experiment_scripts import run_quick

SETTINGS = {(placement, lr, warmup) for placement in ("pre", "post")
            for lr in ("0.001", "0.003", "0.01") for warmup in ("0", "0.1", "0.3")}  # fmt: skip
SEEDS = (1, 2)  # quick mode's
SECTIONS = ("# Layer norm placement and warm-up", "## Final validation loss and divergence",
            "## Differences", "## What it shows", "## Machine and time")  # fmt: skip
LOSS_ROW = re.compile(
    r"^\| (pre|post) \| ([\d.]+) \| ([\d.]+) \| (\d+) \| ([^|]+) \| (\d+) \| (\d+) \| ([^|]+) \|$",
    re.MULTILINE,
)
# lr, then pre - post at each of 3 warm-ups, then the gain of 2 warm-ups for each placement.
DIFFERENCE_ROW = re.compile(r"^\| (0\.001|0\.003|0\.01) \|((?: [^|]+ \|){7})$", re.MULTILINE)
TRAINED_LINE = re.compile(r"^  \S+-seed\d: (completed|failed), ", re.MULTILINE)


def unigram_loss(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log(n / len(text)) for n in counts.values())


def numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)]


@pytest.mark.slow
def test_the_layernorm_experiment_writes_its_page_and_reuses_its_runs(tmp_path: Path) -> None:
    runs, page_dir, corpus = tmp_path / "runs", tmp_path / "page", tmp_path / "words.txt"
    first = run_quick("experiment_layernorm.py", tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(TRAINED_LINE.findall(first.stdout)) == len(SETTINGS) * len(SEEDS), first.stdout

    names = {f"{p}-lr{lr}-warmup{w}-seed{s}" for p, lr, w in SETTINGS for s in SEEDS}
    assert {d.name for d in runs.iterdir()} == names
    results = {name: json.loads((runs / name / "results.json").read_text()) for name in names}
    for name, result in results.items():
        placement, lr, warmup = re.fullmatch(
            r"(\w+)-lr([\d.]+)-warmup([\d.]+)-seed\d", name
        ).groups()
        assert result["status"] in ("completed", "failed"), name
        assert {f"model.placement={placement}", f"optim.lr={lr}",
                f"schedule.warmup_ratio={warmup}", "size=tiny"} <= set(result["overrides"])  # fmt: skip

    text = (page_dir / "layernorm.md").read_text()
    for section in SECTIONS:
        assert f"\n{section}\n" in f"\n{text}", f"no {section!r} on the page:\n{text}"
    assert "> Quick mode:" in text and "No figure here is a result." in text

    # The unigram loss on the page is the entropy of the corpus's last 10% (xfmr's val split).
    full = corpus.read_text()
    unigram = unigram_loss(full[int(len(full) * 0.9) :])
    assert f"unigram loss of the validation split, {unigram:.3f} nats" in text, text

    rows = LOSS_ROW.findall(text)
    assert {(p, lr, w) for p, lr, w, *_ in rows} == SETTINGS and len(rows) == len(SETTINGS), text
    for placement, lr, warmup, completed, loss, diverged, not_finite, rise in rows:
        own = [results[f"{placement}-lr{lr}-warmup{warmup}-seed{s}"] for s in SEEDS]
        finals = [r["metrics"]["val/loss"] for r in own if r["status"] == "completed"]
        assert int(completed) == len(finals)
        assert int(not_finite) == sum(r["status"] == "failed" for r in own)
        assert int(diverged) == int(not_finite) + sum(not v <= unigram for v in finals)
        shown = numbers(loss)
        if finals:
            assert all(math.isfinite(v) and 0 < v < 5 for v in shown), loss
            assert shown[0] == pytest.approx(sum(finals) / len(finals), abs=1e-3), loss
        if len(finals) == 2:  # mean [low, high]
            assert len(shown) == 3 and shown[1] <= shown[0] <= shown[2], loss
        assert rise.strip() == "-" or 0 <= float(rise) < 5, rise

    differences = DIFFERENCE_ROW.findall(text)
    assert [lr for lr, _ in differences] == ["0.001", "0.003", "0.01"], text
    for _, cells in differences:
        for cell in cells.split("|")[:-1]:
            assert cell.strip() == "-" or all(math.isfinite(v) for v in numbers(cell)), cell

    figure = page_dir / "layernorm" / "loss_by_lr.png"
    assert figure.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and figure.stat().st_size > 5000
    assert "](layernorm/loss_by_lr.png)" in text
    assert "Runs that diverged: pre-LN at warm-up 0, " in text
    assert re.search(r"on these runs, (yes|no)|post-LN gains more from warm-up", text), text

    # A second call finds every run finished and trains none of them again.
    written = {name: (runs / name / "results.json").stat().st_mtime_ns for name in names}
    second = run_quick("experiment_layernorm.py", tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not TRAINED_LINE.search(second.stdout), second.stdout
    assert {n: (runs / n / "results.json").stat().st_mtime_ns for n in names} == written
    assert (page_dir / "layernorm.md").read_text().count("\n| pre | ") == len(SETTINGS) // 2
