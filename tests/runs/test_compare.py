"""`xfmr-compare` on a real tiny grid sweep (pos x seed) made once by the real `xfmr-train -m`,
and on run directories the tests write in the formats older runs and a sweep's parent leave."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import compare_cli as compare
from helpers.cli import compare_json as as_json
from helpers.cli import run_cli
from helpers.runs import CORPUS, TINY, read_results

JOBS = ("0", "1", "2", "3")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare")
    corpus = root / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    sweep_dir = root / "sweep"
    args = ["-m", *TINY, "data=text", f"data.path={corpus}", "pos=learned,sinusoidal", "seed=1,2"]
    result = run_cli([*args, f"hydra.sweep.dir={sweep_dir}"], root)
    assert result.returncode == 0, result.output
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == list(JOBS)
    return sweep_dir


@pytest.fixture(scope="module")
def with_failure(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep copied elsewhere (results only, as from another machine), plus a job whose
    process was killed: only the minimal results.json a sweep's parent writes for it."""
    copy = tmp_path_factory.mktemp("copied") / "sweep"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("checkpoints", "*.ckpt"))
    overrides = [
        o if not o.startswith("seed=") else "seed=3" for o in _results(sweep, "0")["overrides"]
    ]
    (copy / "4").mkdir()
    failed = {"status": "failed", "reason": "killed by SIGKILL", "overrides": overrides}
    (copy / "4" / "results.json").write_text(json.dumps(failed))
    return copy


def _results(sweep: Path, job: str) -> dict:
    return read_results(sweep / job)


def _pos(results: dict) -> str:
    return next(o.split("=", 1)[1] for o in results["overrides"] if o.startswith("pos="))


def test_a_row_per_run_best_first_with_the_differing_overrides_as_columns(sweep: Path) -> None:
    table = as_json([sweep, "--no-group"], sweep.parent)
    assert [row["run"] for row in sorted(table["rows"], key=lambda r: r["run"])] == [
        f"sweep/{job}" for job in JOBS
    ]
    assert {"pos", "seed"} <= set(table["columns"])
    # Overrides the same in every run say nothing about the difference between them.
    assert not {"size", "data", "data.path", "trainer.max_steps"} & set(table["columns"])
    finals = [row["final val/loss"] for row in table["rows"]]
    assert finals == sorted(finals)
    for row in table["rows"]:
        results = _results(sweep, row["run"].split("/")[1])
        assert row["final val/loss"] == results["metrics"]["val/loss"]
        assert row["best val/loss"] == min(h["val/loss"] for h in results["history"])
        assert (row["pos"], row["steps"], row["params"]) == (
            _pos(results),
            results["step"],
            results["n_parameters"],
        )

    shown = compare([sweep], sweep.parent)
    assert shown.returncode == 0, shown.output
    header = next(line for line in shown.stdout.splitlines() if "pos" in line and "┃" in line)
    assert "seed" not in header, "by default the seeds of a setting are averaged over"
    assert "learned" in shown.stdout and "sinusoidal" in shown.stdout
    per_run = compare([sweep, "--no-group"], sweep.parent).stdout
    assert "seed" in per_run and all(f"sweep/{job}" in per_run for job in JOBS)


def test_grouped_mean_and_sample_std_equal_numpy_over_each_setting(sweep: Path) -> None:
    table = as_json([sweep], sweep.parent)
    assert [sorted(row) for row in table["rows"]] == [sorted(table["columns"])] * 2
    assert "seed" not in table["columns"]
    for row in table["rows"]:
        members = [_results(sweep, job) for job in JOBS if _pos(_results(sweep, job)) == row["pos"]]
        finals = [r["metrics"]["val/loss"] for r in members]
        bests = [min(h["val/loss"] for h in r["history"]) for r in members]
        assert row["n"] == len(members) == 2
        assert row["final val/loss mean"] == pytest.approx(np.mean(finals), rel=1e-12)
        assert row["final val/loss std"] == pytest.approx(np.std(finals, ddof=1), rel=1e-9)
        assert row["best val/loss mean"] == pytest.approx(np.mean(bests), rel=1e-12)
        assert row["best val/loss std"] == pytest.approx(np.std(bests, ddof=1), rel=1e-9)
    means = [row["final val/loss mean"] for row in table["rows"]]
    assert means == sorted(means)

    single = as_json([sweep, "--group-by", "pos,seed"], sweep.parent)
    assert [(row["n"], row["final val/loss std"]) for row in single["rows"]] == [(1, None)] * 4


def test_when_only_the_seed_differs_all_runs_form_one_group(sweep: Path) -> None:
    learned = [sweep / job for job in JOBS if _pos(_results(sweep, job)) == "learned"]
    table = as_json(learned, sweep.parent)
    finals = [read_results(run)["metrics"]["val/loss"] for run in learned]
    (row,) = table["rows"]
    assert row["n"] == 2
    assert row["final val/loss mean"] == pytest.approx(np.mean(finals), rel=1e-12)
    assert row["final val/loss std"] == pytest.approx(np.std(finals, ddof=1), rel=1e-9)


def test_csv_json_and_markdown_carry_the_same_table(sweep: Path) -> None:
    as_json_ = as_json([sweep, "--no-group"], sweep.parent)
    as_csv = list(
        csv.reader(
            io.StringIO(compare([sweep, "--no-group", "--format", "csv"], sweep.parent).stdout)
        )
    )
    markdown = compare([sweep, "--no-group", "--format", "markdown"], sweep.parent).stdout
    md_rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|")
    ]
    assert as_csv[0] == md_rows[0] == as_json_["columns"]
    assert len(as_csv) - 1 == len(md_rows) - 2 == len(as_json_["rows"]) == 4
    for row, csv_row, md_row in zip(as_json_["rows"], as_csv[1:], md_rows[2:], strict=True):
        for column, csv_cell, md_cell in zip(as_json_["columns"], csv_row, md_row, strict=True):
            value = row[column]
            if isinstance(value, int | float):
                assert float(csv_cell) == value, column
                assert float(md_cell.replace(",", "")) == pytest.approx(value, rel=1e-4), column
            else:
                assert csv_cell == ("" if value is None else value), column
                assert md_cell == ("-" if value is None else value), column
    assert isinstance(as_json_["rows"][0]["final val/loss"], float)
    assert isinstance(as_json_["rows"][0]["params"], int)


def test_plot_writes_a_png_of_the_curves(sweep: Path, tmp_path: Path) -> None:
    import matplotlib.image

    out = tmp_path / "figures" / "curves.png"
    result = compare([sweep, "--plot", out], tmp_path)
    assert result.returncode == 0, result.output
    pixels = matplotlib.image.imread(out)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels[..., :3].std() > 0.05, "the image is blank"


def test_html_writes_one_self_contained_page(with_failure: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    result = compare([with_failure, "--html", out], tmp_path)
    assert result.returncode == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert page.count("Plotly.newPlot") == 2  # the curves and the parallel coordinates
    assert '"type":"parcoords"' in page.replace(" ", "")
    assert external_references(page) == [], "the page must open with no network"
    for job in (*JOBS, "4"):
        assert f'<td class="text">sweep/{job}</td>' in page
    assert "killed by SIGKILL" in page


class _References(HTMLParser):
    """The src and href attributes of a page's tags (script bodies are not parsed as tags)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [value or "" for name, value in attrs if name in ("src", "href")]


def external_references(page: str) -> list[str]:
    parser = _References()
    parser.feed(page)
    return parser.found


def test_a_failed_run_is_shown_with_its_reason_and_counted(sweep: Path, with_failure: Path) -> None:
    per_run = as_json([with_failure, "--no-group"], with_failure.parent)
    last = per_run["rows"][-1]
    assert (last["run"], last["status"], last["seed"]) == ("sweep/4", "failed", "3")
    assert last["note"] == "killed by SIGKILL"
    assert last["final val/loss"] is None and last["steps"] is None
    shown = compare([with_failure, "--no-group"], with_failure.parent).stdout
    assert "killed by SIGKILL" in shown and "failed" in shown

    grouped = as_json([with_failure], with_failure.parent)
    rows = {row["pos"]: row for row in grouped["rows"]}
    failed_pos = _pos(_results(sweep, "0"))
    assert rows[failed_pos]["failed"] == 1 and rows[failed_pos]["n"] == 2
    assert "sweep/4 failed: killed by SIGKILL" in rows[failed_pos]["note"]
    finals = [
        _results(sweep, j)["metrics"]["val/loss"]
        for j in JOBS
        if _pos(_results(sweep, j)) == failed_pos
    ]
    assert rows[failed_pos]["final val/loss mean"] == pytest.approx(np.mean(finals), rel=1e-12)
    assert sum(row["failed"] for row in grouped["rows"]) == 1


def test_the_sweeps_direction_orders_the_rows(with_failure: Path, tmp_path: Path) -> None:
    copy = tmp_path / "sweep"
    shutil.copytree(with_failure, copy)
    (copy / "sweep.json").write_text(
        json.dumps({"kind": "grid", "optimized_metric": "val/loss", "direction": "maximize"})
    )
    rows = as_json([copy, "--no-group"], tmp_path)["rows"]
    finals = [row["final val/loss"] for row in rows]
    assert finals[:4] == sorted(finals[:4], reverse=True) and finals[4] is None
    assert "higher is better" in as_json([copy], tmp_path)["title"]
    lower = as_json([copy, "--no-group", "--mode", "min"], tmp_path)["rows"]
    assert [row["final val/loss"] for row in lower][:4] == sorted(finals[:4])


def test_old_run_files_nan_null_and_hydra_overrides(tmp_path: Path) -> None:
    """Runs from before results.json kept overrides or the optimized metric: those come from
    .hydra/overrides.yaml and config.yaml; NaN and null values are shown, never dropped."""
    for name, pos, ppl in (("a", "learned", "NaN"), ("b", "rope", "7.5"), ("c", "alibi", "null")):
        run = tmp_path / "old" / name
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "overrides.yaml").write_text(f"- pos={pos}\n- hydra.job.chdir=true\n")
        (run / "config.yaml").write_text("seed: 0\noptimized_metric: val/ppl\n")
        history = f'[{{"step": 2, "val/ppl": {ppl}}}]' if ppl != "null" else "null"
        (run / "results.json").write_text(
            f'{{"status": "completed", "metrics": {{"val/ppl": {ppl}}}, "step": 2, "history": {history}}}'
        )
    table = as_json([tmp_path / "old"], tmp_path)
    assert "val/ppl, lower is better" in table["title"]
    assert [row["run"] for row in table["rows"]] == ["old/b", "old/a", "old/c"]
    assert [row["pos"] for row in table["rows"]] == ["rope", "learned", "alibi"]
    assert not any(column.startswith("hydra") for column in table["columns"])
    assert [row["final val/ppl"] for row in table["rows"]] == [7.5, None, None]  # NaN: null in JSON
    shown = compare([tmp_path / "old"], tmp_path).stdout
    assert "nan" in shown and "alibi" in shown


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["does/not/exist"], "does/not/exist: does not exist"),
        (["empty"], "empty: holds no runs"),
        (["SWEEP", "--metric", "val/acc"], "--metric val/acc: no run has it; the runs have: "),
        (["SWEEP", "--group-by", "lr"], "--group-by lr: no run has the override lr"),
        (["SWEEP", "--mode", "best"], "argument --mode: invalid choice: 'best'"),
    ],
)
def test_a_mistake_is_one_line_and_exit_2(
    sweep: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    (tmp_path / "empty").mkdir()
    result = compare([str(sweep) if a == "SWEEP" else a for a in args], tmp_path)
    assert result.returncode == 2, result.output
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"xfmr-compare: error: {expected}"), result.stderr
    if "--metric" in args:
        assert "val/loss" in result.stderr and "val/ppl" in result.stderr


def test_no_torch_and_no_plotting_library_loads_for_a_table(sweep: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "xfmr.cli.compare",
            str(sweep),
            "--format",
            "csv",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    for heavy in ("torch", "matplotlib", "plotly", "lightning"):
        assert heavy not in loaded, heavy
    assert proc.stdout.startswith("pos,n,final val/loss mean,"), proc.stdout
