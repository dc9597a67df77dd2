"""The page `xfmr-compare --html` writes, opened from disk in a real browser (headless
chromium, no network): the tables hold the runs, and plotly drew the curves and the parallel
coordinates. Skipped where chromium is missing, except in CI, which installs it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers.browser import browse, chromium
from helpers.cli import run_cli

SETTINGS = [("learned", 1), ("learned", 2), ("sinusoidal", 1), ("sinusoidal", 2)]


def write_runs(root: Path) -> list[str]:
    """Four completed runs of a pos x seed grid and one killed job, as their files are written."""
    for job, (pos, seed) in enumerate(SETTINGS):
        losses = [3.0 - 0.2 * k - 0.05 * job for k in range(3)]
        history = [
            {"step": 2 * (k + 1), "tokens": 128 * (k + 1), "val/loss": loss}
            for k, loss in enumerate(losses)
        ]
        results = {
            "status": "completed",
            "metrics": {"val/loss": losses[-1], "train/loss": losses[-1] + 0.1},
            "best": history[-1],
            "step": 6,
            "ms_per_step": 5.0 + job,
            "n_parameters": 167552 if pos == "learned" else 102016,
            "overrides": [f"pos={pos}", f"seed={seed}", "trainer.max_steps=6"],
            "history": history,
            "optimized_metric": "val/loss",
        }
        (root / str(job)).mkdir(parents=True)
        (root / str(job) / "results.json").write_text(json.dumps(results))
    killed = {"status": "failed", "reason": "killed by SIGKILL"}
    (root / "4").mkdir()
    overrides = ["pos=learned", "seed=3", "trainer.max_steps=6"]
    (root / "4" / "results.json").write_text(json.dumps({**killed, "overrides": overrides}))
    return [f"runs/{job}" for job in range(5)]


def element(dom: str, element_id: str, until: str | None = None) -> str:
    """The serialized DOM from the element with `element_id` to the one with `until`."""
    start = dom.index(f' id="{element_id}"')
    return dom[start : dom.index(f' id="{until}"', start) if until else len(dom)]


def test_the_page_renders_its_tables_curves_and_parallel_coordinates(tmp_path: Path) -> None:
    browser = chromium()  # skip before any work when there is none
    labels = write_runs(tmp_path / "runs")
    page = tmp_path / "compare.html"
    made = run_cli(["runs", "--html", str(page)], tmp_path, timeout=120, module="xfmr.cli.compare")
    assert made.returncode == 0, made.output

    dumped = browse(["--dump-dom", page.as_uri()], tmp_path)
    assert dumped.returncode == 0, f"{browser}: {dumped.stderr[-2000:]}"
    dom = dumped.stdout
    per_run = element(dom, "table-1", until="curves")
    assert per_run.count("<tr class=") == 5
    assert all(f">{label}<" in per_run for label in labels)
    assert "killed by SIGKILL" in per_run

    curves = element(dom, "curves", until="parallel")
    assert 'class="main-svg"' in curves, "plotly did not draw the curves"
    # Per setting: its two runs faint, the band's two edges, the mean (the killed job has no curve).
    assert len(re.findall(r'class="trace scatter', curves)) == 2 * 5

    parallel = element(dom, "parallel")
    assert 'class="main-svg"' in parallel and 'class="parcoords"' in parallel
    assert "gl-canvas" in parallel, "no WebGL canvas: the lines were not drawn"
    titles = re.findall(r'class="axis-title"[^>]*>([^<]*)<', parallel)
    assert titles == ["pos", "final val/loss"]  # the seed is a repeat, not an axis
    assert ">learned</text>" in parallel and ">sinusoidal</text>" in parallel

    shot = tmp_path / "compare.png"
    taken = browse([f"--screenshot={shot}", "--window-size=1400,2200", page.as_uri()], tmp_path)
    assert taken.returncode == 0, taken.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2200, 1400)
    assert pixels[..., :3].std() > 0.05, "the screenshot is blank"


def test_the_address_opens_the_curves_on_the_axis_it_names(tmp_path: Path) -> None:
    """`#x=tokens` redraws the curves against training tokens (the page's switch, run by the
    browser), and `#x=flops`, which no run recorded, says so over an empty plot."""
    browser = chromium()
    write_runs(tmp_path / "runs")
    page = tmp_path / "compare.html"
    made = run_cli(["runs", "--html", str(page)], tmp_path, timeout=120, module="xfmr.cli.compare")
    assert made.returncode == 0, made.output
    titles = {}
    for axis in ("step", "tokens", "flops"):
        dumped = browse(["--dump-dom", f"{page.as_uri()}#x={axis}"], tmp_path)
        assert dumped.returncode == 0, f"{browser}: {dumped.stderr[-2000:]}"
        curves = element(dumped.stdout, "curves-note", until="parallel")
        titles[axis] = re.findall(r'class="xtitle"[^>]*>([^<]*)<', curves)
        traces = len(re.findall(r'class="trace scatter', curves))
        assert traces == (0 if axis == "flops" else 2 * 5), axis
        if axis == "flops":
            assert "No run recorded val/loss with flops" in curves
    assert titles == {"step": ["step"], "tokens": ["training tokens"], "flops": ["training FLOPs"]}
