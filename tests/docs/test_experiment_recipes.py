"""benchmarks/experiment_recipes.py: where a validation curve first reaches a loss, and the
script end to end in quick mode: eight Shakespeare settings and Multi30k padded against packed,
two seeds each, every setting paired with its baseline at equal steps and at equal training
time, the reach table, and a second call that reuses the finished runs."""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from helpers.docs import blocks_of, marker_problem
from helpers.experiment_scripts import (
    benchmark_script,
    is_png,
    run_benchmark,
    tables,
    write_corpus,
)

SHAKESPEARE = {"baseline", "muon", "rotary", "relu2", "qk_norm", "softcap", "untied", "all"}
MULTI30K = {"padded", "packed"}


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return benchmark_script("experiment_recipes")


def test_a_curve_reaches_a_loss_where_it_first_comes_down_to_it(script: ModuleType) -> None:
    curve = [(100, 3.0), (200, 2.0), (300, 1.5), (400, 1.8), (500, 1.2)]
    assert script.crossing(curve, 2.5) == pytest.approx(150)  # halfway from 3.0 to 2.0
    assert script.crossing(curve, 2.0) == 200  # exactly at a validation
    assert script.crossing(curve, 1.5) == 300  # the first time, not after the rise
    assert script.crossing(curve, 1.3) == pytest.approx(400 + 100 * 0.5 / 0.6)
    assert script.crossing(curve, 3.5) == 100  # below it at the first validation
    assert script.crossing(curve, 1.0) is None
    assert script.crossing([], 1.0) is None


def _parallel_corpus(directory: Path) -> Path:
    """Made-up sentences and their words reversed, as Multi30k's four files."""
    rng = random.Random(0)
    words = ["".join(rng.choices("abcdefghij", k=rng.randint(2, 6))) for _ in range(80)]
    source = [" ".join(rng.choices(words, k=rng.randint(3, 12))) for _ in range(240)]
    directory.mkdir()
    for split, lines in (("train", source[:200]), ("val", source[200:])):
        (directory / f"{split}.de").write_text("\n".join(lines) + "\n")
        (directory / f"{split}.en").write_text("\n".join(" ".join(reversed(s.split()))
                                                         for s in lines) + "\n")  # fmt: skip
    return directory


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    corpus, multi30k = tmp_path / "words.txt", tmp_path / "multi30k"
    if not corpus.exists():
        write_corpus(corpus)
        _parallel_corpus(multi30k)
    args = ["--quick", f"--data={corpus}", f"--multi30k={multi30k}", f"--runs={tmp_path / 'runs'}",
            f"--page={tmp_path / 'page'}"]  # fmt: skip
    result = run_benchmark(
        "experiment_recipes.py", args, {"XFMR_CACHE_DIR": str(tmp_path / "cache")}
    )
    if result.returncode == 0:
        page = tmp_path / "page" / "recipes.md"
        problems = [f"{b.where}: {p}" for b in blocks_of(page.read_text(), page)
                    if (p := marker_problem(b))]  # fmt: skip
        assert not problems, "\n".join(problems)
    return result


def _rounds_to(shown: str, value: float) -> bool:
    """Whether the number shown as `shown` (its last digit rounded) could be `value` exactly or
    lie on either side of it."""
    decimals = len(shown.split(".")[1]) if "." in shown and "e" not in shown else None
    if decimals is None:
        return float(shown) == value
    return abs(float(shown) - value) <= 0.5 * 10**-decimals


@pytest.mark.slow
def test_the_recipes_page_is_written_from_its_runs(tmp_path: Path, script: ModuleType) -> None:
    result = _run(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "recipes.md").read_text()
    assert "Quick mode" in page and "## Scope" in page and "## Machine and time" in page
    assert "Holm" in page and "Welch" not in page
    tokens, time, reach = tables(page, "setting")
    assert {row[0] for row in tokens} == SHAKESPEARE | MULTI30K and len(tokens) == 10
    # At equal time a quick run on a loaded machine may validate first after S: its setting
    # then has fewer runs there, or none (the slowest, `all`, most often).
    assert {"baseline", "padded"} <= {row[0] for row in time} <= SHAKESPEARE | MULTI30K
    for table in (tokens, time):
        for name, data, n, _, delta, test, p, p_equivalent, verdict, _, _ in table:
            assert data == ("multi30k" if name in MULTI30K else "shakespeare")
            if table is time and n != "2":
                continue
            assert n == "2"
            if name in ("baseline", "padded"):
                assert {delta, test, p, p_equivalent, verdict} == {"-"}
            else:
                assert test == "paired (n=2)", (name, test)
                if not _rounds_to(p, 0.05):  # a p shown as 0.05 may be either side of it
                    assert verdict.startswith("different") == (float(p) < 0.05), (name, p)
    # At equal steps every run's final loss; at equal time, each read off its own history.
    seconds = dict(re.findall(r"(\w+) S = ([\d.]+) s", page))
    for name, data, _, loss, *_ in tokens:
        runs = _results(tmp_path, name, data)
        final = sum(r["metrics"]["val/loss"] for r in runs) / 2
        assert float(loss.split(" ")[0]) == pytest.approx(final, abs=6e-4), name
    for name, data, n, loss, *_ in time:
        if n != "2":  # a run without a validation by S (above)
            continue
        at = [_at_time(r["history"], float(seconds[data])) for r in _results(tmp_path, name, data)]
        assert float(loss.split(" ")[0]) == pytest.approx(sum(at) / 2, abs=6e-4), name
    rows = {row[0]: row for row in reach}
    assert rows["baseline"][4] == "20" and rows["baseline"][6] == "100%"
    assert rows["padded"][4] == "20" and rows["padded"][5] == "-"
    assert is_png(tmp_path / "page" / "recipes" / "curves.png")

    results = sorted((tmp_path / "runs").glob("*/results.json"))
    assert len(results) == 20
    written = {path: path.stat().st_mtime_ns for path in results}
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed" not in again.stdout, again.stdout  # no run trained again
    assert {path: path.stat().st_mtime_ns for path in results} == written


def _results(tmp_path: Path, name: str, data: str) -> list[dict]:
    prefix = "multi30k-" if data == "multi30k" else ""
    return [json.loads((tmp_path / "runs" / f"{prefix}{name}-seed{seed}" / "results.json")
                       .read_text()) for seed in (1, 2)]  # fmt: skip


def _at_time(history: list[dict], seconds: float) -> float:
    """The validation loss at `seconds` of training, linear between the validations around it."""
    points = [(e["time_s"], e["val/loss"]) for e in history]
    for (t0, y0), (t1, y1) in zip(points, points[1:], strict=False):
        if t0 <= seconds <= t1:
            return y0 + (y1 - y0) * (seconds - t0) / (t1 - t0)
    assert points[0][0] == seconds or points[-1][0] == seconds, (points, seconds)
    return points[0][1] if points[0][0] == seconds else points[-1][1]
