"""`xfmr-compare --at`: each run's metric read at an equal step, number of training tokens, FLOPs
or seconds, interpolated between its validations, on run directories the tests write (a small
and a big model, one big run stopped early, one run from before results.json counted tokens);
and the page's switch of the curves' x-axis between those four."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers.cli import compare_cli as compare
from helpers.cli import compare_json as as_json
from xfmr.errors import UserError
from xfmr.runs.compare.points import Point, interpolate, parse_point, shortfall, value_at
from xfmr.runs.compare.runs import AXES, Run

TOKENS_PER_STEP = 512
# Per model size: training FLOPs per token and seconds per step; the big model learns more per
# token at four times the compute.
SIZES = {"small": (1e6, 0.1), "big": (4e6, 0.3)}
FINALS = {("small", 1): 2.40, ("small", 2): 2.45, ("small", 3): 2.38, ("big", 1): 2.10,
          ("big", 2): 2.16, ("big", 3): 2.13}  # fmt: skip
STEPS = (100, 200, 300)
SHORT = ("big", 3)  # stopped after its second validation (a smaller budget)


def loss(final: float, step: int) -> float:
    return final + 30.0 / step


def write_run(root: Path, job: int, results: dict) -> None:
    (root / str(job)).mkdir(parents=True)
    (root / str(job) / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("points") / "sweep"
    for job, ((size, seed), final) in enumerate(FINALS.items()):
        per_token, seconds = SIZES[size]
        steps = STEPS[:2] if (size, seed) == SHORT else STEPS
        history = [
            {
                "step": step,
                "time_s": step * seconds,
                "tokens": step * TOKENS_PER_STEP,
                "flops": step * TOKENS_PER_STEP * per_token,
                "val/loss": loss(final, step),
            }
            for step in steps
        ]
        write_run(root, job, {
            "status": "completed",
            "metrics": {"val/loss": history[-1]["val/loss"]},
            "step": steps[-1],
            "flops_per_token": per_token,
            "history": history,
            "overrides": [f"size={size}", f"seed={seed}"],
            "optimized_metric": "val/loss",
        })  # fmt: skip
    # From before results.json counted tokens and FLOPs: step and time only.
    old = [{"step": s, "time_s": s * 0.1, "val/loss": loss(2.5, s)} for s in STEPS]
    write_run(root, len(FINALS), {
        "status": "completed",
        "metrics": {"val/loss": old[-1]["val/loss"]},
        "step": 300,
        "history": old,
        "overrides": ["size=small", "seed=4"],
    })  # fmt: skip
    return root


def history_of(sweep: Path, job: int) -> list[dict]:
    return json.loads((sweep / str(job) / "results.json").read_text())["history"]


def by_hand(history: list[dict], field: str, x: float) -> float | None:
    """The metric at `x`, between the validations around it, worked out independently."""
    for before, after in zip(history, history[1:], strict=False):
        if before[field] <= x <= after[field]:
            share = (x - before[field]) / (after[field] - before[field])
            return before["val/loss"] + share * (after["val/loss"] - before["val/loss"])
    return None


def test_interpolation_is_exact_at_validations_and_linear_between() -> None:
    points = [(10.0, 3.0), (20.0, 2.0), (40.0, 1.0)]
    assert [interpolate(points, x) for x in (10, 20, 40)] == [3.0, 2.0, 1.0]
    assert interpolate(points, 15) == pytest.approx(2.5)
    assert interpolate(points, 25) == pytest.approx(1.75)
    assert interpolate(points, 9.99) is None and interpolate(points, 40.01) is None
    assert interpolate([], 1) is None
    history = ({"step": 10, "tokens": 100, "val/loss": 3.0}, {"step": 20, "tokens": 200,
               "val/loss": 2.0})  # fmt: skip
    run = Run(Path("r"), "completed", metrics={"val/loss": 1.9}, history=history)
    assert value_at(run, "val/loss", None) == 1.9  # no point: the final value
    assert value_at(run, "val/loss", Point("tokens", 150)) == pytest.approx(2.5)
    assert value_at(run, "val/loss", Point("step", 20)) == 2.0
    assert shortfall(run, "val/loss", Point("tokens", 150)) is None
    assert shortfall(run, "val/loss", Point("tokens", 250)) == "reached tokens=200 at step 20"
    assert shortfall(run, "val/loss", Point("tokens", 50)) == "validated first at tokens=100"
    assert "no time_s in its history" in shortfall(run, "val/loss", Point("time", 1))


@pytest.mark.parametrize(
    ("spec", "point"),
    [
        ("flops=1e15", Point("flops", 1e15)),
        ("flops=2.5e12", Point("flops", 2.5e12)),
        ("tokens=200000", Point("tokens", 2e5)),
        ("time=90.5", Point("time", 90.5)),
        ("step=300", Point("step", 300)),
    ],
)
def test_at_reads_numbers_as_people_write_them(spec: str, point: Point) -> None:
    assert parse_point(spec) == point
    assert str(parse_point("flops=2.5e12")) == "flops=2.5e12"
    assert str(parse_point("step=300")) == "step=300"


@pytest.mark.parametrize("spec", ["tokens", "bytes=3", "time=-1", "step=abc", "flops=nan", "=1"])
def test_a_bad_point_names_the_kinds(spec: str) -> None:
    with pytest.raises(UserError, match="give KIND=N with KIND one of step, tokens, flops, time"):
        parse_point(spec)


def test_at_tokens_with_a_baseline_reads_every_run_at_that_point(sweep: Path) -> None:
    """The means, intervals and t-test are those of the values at the point, the runs that
    never got there (or never counted tokens) named below the table with how far they got."""
    x = 250 * TOKENS_PER_STEP  # between the second and third validations
    table = as_json([sweep, "--at", f"tokens={x:g}", "--baseline", "size=small"], sweep.parent)
    column = "val/loss at tokens=128000"
    assert "val/loss at tokens=128000 (interpolated between validations)" in table["title"]
    assert f"{column} mean" in table["columns"] and "final val/loss mean" not in table["columns"]
    at_point = {}
    for job, (size, seed) in enumerate(FINALS):
        value = by_hand(history_of(sweep, job), "tokens", x)
        assert (value is None) == ((size, seed) == SHORT)
        if value is not None:
            at_point.setdefault(size, []).append(value)
    rows = {row["size"]: row for row in table["rows"]}
    for size, values in at_point.items():
        assert rows[size][f"{column} mean"] == pytest.approx(np.mean(values))
        assert rows[size][f"{column} std"] == pytest.approx(np.std(values, ddof=1))
    # The baseline's seed whose run never got there leaves no pair: Welch's test.
    assert rows["big"]["test"] == "Welch"
    welch = stats.ttest_ind(at_point["big"], at_point["small"], equal_var=False)
    assert rows["big"]["p (t-test)"] == pytest.approx(welch.pvalue)
    assert rows["big"]["Δ vs baseline"] == pytest.approx(
        np.mean(at_point["big"]) - np.mean(at_point["small"])
    )
    assert rows["small"]["significant"] == "baseline"
    assert "no val/loss at tokens=128000: sweep/6" in rows["small"]["note"]
    unreached = table["notes"][-1]
    assert unreached.startswith("Not at tokens=128000, so in no mean or test: 2 of 7 runs")
    assert "sweep/5: reached tokens=102400 at step 200" in unreached
    assert "sweep/6: no tokens in its history" in unreached


def test_at_an_entry_is_the_value_there_and_at_the_end_the_final_one(sweep: Path) -> None:
    per_run = as_json([sweep, "--at", "step=300", "--no-group"], sweep.parent)["rows"]
    final = as_json([sweep, "--no-group"], sweep.parent)["rows"]
    finals = {row["run"]: row["final val/loss"] for row in final}
    at_end = {row["run"]: row["val/loss at step=300"] for row in per_run}
    assert at_end == {run: None if run == "sweep/5" else value for run, value in finals.items()}
    # Equal compute: 1.2e11 FLOPs are the small model's step 234, before the big one's first
    # validation (step 100, 2.048e11 FLOPs).
    table = as_json([sweep, "--at", "flops=1.2e11", "--no-group"], sweep.parent)
    values = {row["run"]: row["val/loss at flops=1.2e11"] for row in table["rows"]}
    for job, (size, _) in enumerate(FINALS):
        expected = by_hand(history_of(sweep, job), "flops", 1.2e11)
        assert (expected is None) == (size == "big")
        assert values[f"sweep/{job}"] == (None if expected is None else pytest.approx(expected))
    assert "sweep/3: validated first at flops=2.048e11" in table["notes"][-1]


def test_the_point_and_the_runs_short_of_it_reach_every_format(sweep: Path) -> None:
    args = [sweep, "--at", "time=75"]
    markdown = compare([*args, "--format", "markdown"], sweep.parent)
    shown = compare(args, sweep.parent)
    csv = compare([*args, "--format", "csv"], sweep.parent)
    for result in (markdown, shown, csv):
        assert result.returncode == 0, result.output
    short_of = "Not at time=75, so in no mean or test"
    assert "val/loss at time=75 mean" in markdown.stdout and short_of in markdown.stdout
    assert "sweep/5: reached time=60 at step 200" in shown.stdout.replace("\n", " ")
    assert csv.stdout.startswith("size,n,val/loss at time=75 mean,") and short_of not in csv.stdout
    assert short_of in csv.stderr  # csv stays a table for scripts


def test_a_bad_at_is_one_line_and_exit_2(sweep: Path) -> None:
    result = compare([sweep, "--at", "epochs=3"], sweep.parent)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("xfmr-compare: error: --at epochs=3: give KIND=N")


def test_the_python_api_reads_at_a_point(sweep: Path) -> None:
    from xfmr.api.comparing import compare as compare_frame

    frame = compare_frame(sweep, at="step=250", group=False)
    assert "val/loss at step=250" in frame.columns
    assert frame.attrs["notes"][-1].endswith("sweep/5: reached step=200")


def curves_views(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="curves-views">(.*?)</script>', html)
    assert found, "no curves views in the page"
    return json.loads(found.group(1))


def test_the_page_switches_the_curves_between_step_tokens_flops_and_time(
    sweep: Path, tmp_path: Path
) -> None:
    page, png = tmp_path / "page.html", tmp_path / "curves.png"
    result = compare([sweep, "--html", page, "--plot", png, "--x", "flops"], tmp_path)
    assert result.returncode == 0, result.output
    assert "Left out against flops (1 of 7 runs: their history has no flops): sweep/6" in (
        result.stderr
    )
    assert png.stat().st_size > 10_000
    html = page.read_text(encoding="utf-8")
    select = re.search(r'<select id="curves-x">(.*?)</select>', html).group(1)
    assert re.findall(r'<option value="(\w+)"', select) == list(AXES)
    assert '<option value="step" selected>' in select  # the default
    assert 'addEventListener("change"' in html and "Plotly.react" in html
    views = curves_views(html)
    assert list(views) == list(AXES)
    for axis, field in AXES.items():
        layout, traces = views[axis]["figure"]["layout"], views[axis]["figure"]["data"]
        assert layout["xaxis"]["title"]["text"].startswith(
            {"step": "step", "tokens": "training tokens", "flops": "training FLOPs",
             "time": "training seconds"}[axis]
        )  # fmt: skip
        runs = {t["name"]: t["x"] for t in traces if t.get("showlegend") is False and "name" in t}
        for job in range(len(FINALS)):
            assert runs[f"sweep/{job}"] == [h[field] for h in history_of(sweep, job)], axis
        # The old run has a curve against step and time, none against tokens or FLOPs.
        assert ("sweep/6" in runs) == (axis in ("step", "time")), axis
        assert ("sweep/6" in views[axis]["note"]) == (axis in ("tokens", "flops")), axis
    # The page's own curves start on the step axis.
    assert 'id="curves-note" class="table-note"></p>' in html
