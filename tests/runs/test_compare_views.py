"""What `xfmr-compare` shows a person: curves named in the legend by the settings that tell
them apart (not by run directory), and a terminal table no wider than 100 characters (or the
terminal, where narrower) that names the columns it leaves to the other formats."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from helpers.cli import compare_cli as compare
from helpers.cli import compare_json as as_json
from xfmr.runs.compare.formats import EVERY_COLUMN, WIDTH, print_rich

FINALS = {
    "learned": [2.390, 2.401, 2.384],
    "rotary": [2.171, 2.178, 2.166],
    "alibi": [2.392, 2.380, 2.399],
}
# Every question --baseline can ask: the widest table there is (20 columns here).
WIDEST = ["--baseline", "pos=learned", "--equivalence", "0.01", "--detect", "0.02"]


def write_run(root: Path, job: int, overrides: list[str], final: float) -> None:
    results = {
        "status": "completed",
        "metrics": {"val/loss": final},
        "step": 30,
        "ms_per_step": 12.5,
        "n_parameters": 167_552,
        "history": [{"step": step, "val/loss": final + 1.0 / step} for step in (10, 20, 30)],
        "overrides": ["size=tiny", *overrides],
        "optimized_metric": "val/loss",
    }
    (root / str(job)).mkdir(parents=True)
    (root / str(job) / "results.json").write_text(json.dumps(results))


def write_sweep(root: Path, seeds: int) -> Path:
    """A sweep of pos (size=tiny in every run), `seeds` runs a setting."""
    job = 0
    for pos, finals in FINALS.items():
        for seed, final in enumerate(finals[:seeds], start=1):
            write_run(root, job, [f"pos={pos}", f"seed={seed}"], final)
            job += 1
    return root


def legend(svg: Path) -> list[str]:
    """The legend's texts in a figure matplotlib wrote as SVG (each text is drawn as paths,
    after a comment holding it)."""
    text = svg.read_text(encoding="utf-8")
    return re.findall(r"<!-- (.+?) -->", text[text.index('id="legend_1"') :])


@pytest.mark.parametrize(
    ("seeds", "args", "expected"),
    [
        (1, [], [f"pos={pos} (n=1)" for pos in FINALS]),  # one run a setting: not grouped
        (3, [], [f"pos={pos} (n=3)" for pos in FINALS]),
        (2, ["--no-group"], [f"pos={pos}, seed={s} (n=1)" for pos in FINALS for s in (1, 2)]),
    ],
    ids=["a-run-a-setting", "grouped", "no-group"],
)
def test_the_legend_names_each_curve_by_the_settings_that_differ(
    tmp_path: Path, seeds: int, args: list[str], expected: list[str]
) -> None:
    root = write_sweep(tmp_path / "pos", seeds)
    figure = tmp_path / "curves.svg"
    result = compare([root, *args, "--plot", figure], tmp_path)
    assert result.returncode == 0, result.output
    assert legend(figure) == expected


def test_runs_no_override_tells_apart_are_named_by_their_directory(tmp_path: Path) -> None:
    from xfmr.runs.compare.figures import metric_curves
    from xfmr.runs.compare.runs import find_runs

    root = tmp_path / "again"
    for job, final in enumerate([2.3, 2.4]):
        write_run(root, job, ["pos=rotary"], final)
    write_run(root, 2, ["pos=alibi"], 2.5)
    names = [curves.label for curves in metric_curves(find_runs([root]), "val/loss", None)]
    assert names == ["pos=rotary (again/0)", "pos=rotary (again/1)", "pos=alibi"]


def _widest_line(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _left_out(shown: str) -> list[str]:
    """The columns the line below the table names as not shown."""
    said = " ".join(shown.split("Not shown here: ")[1].split())  # its lines joined
    return said.split(f" ({EVERY_COLUMN}")[0].split(", ")


@pytest.mark.parametrize("args", [[], WIDEST, ["--no-group"]], ids=["grouped", "baseline", "runs"])
def test_the_terminal_table_fits_100_characters_and_names_what_it_leaves_out(
    tmp_path: Path, args: list[str]
) -> None:
    root = write_sweep(tmp_path / "sweep", 3)
    shown = compare([root, *args], tmp_path)
    assert shown.returncode == 0, shown.output
    assert _widest_line(shown.stdout) <= WIDTH == 100, shown.stdout
    every = as_json([root, *args], tmp_path)["columns"]
    header = [line for line in shown.stdout.splitlines() if line.startswith("┃")]
    left_out = _left_out(shown.stdout)
    assert set(left_out) < set(every)
    notes_shown = "note" in header[-1]  # else each row's note is said below the table
    assert header[0].count("┃") - 1 + len(left_out) + (not notes_shown) == len(every)
    needed = ["run", "status"] if "--no-group" in args else ["n", "final val/loss mean"]
    if args == WIDEST:
        needed += ["Δ vs baseline", "p (Holm)", "significant", "equivalence (±0.01)"]
    for column in ["pos", *needed]:
        assert all(word in " ".join(header) for word in column.split()), (column, header)
        assert column not in left_out


def test_a_narrower_terminal_gets_a_narrower_table(tmp_path: Path, monkeypatch) -> None:
    from xfmr.runs.compare.comparison import compare_runs

    root = write_sweep(tmp_path / "sweep", 3)
    table = compare_runs([root], baseline="pos=learned").tables[0]
    assert len(table.columns) == 20

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "60")
    terminal = Terminal()
    print_rich(table, terminal)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())  # colours and bold aside
    assert _widest_line(shown) <= 60, shown
    assert "rotary" in shown and "Not shown here: " in shown


def test_the_metric_is_shown_however_many_overrides_differ(tmp_path: Path) -> None:
    keys = ["trainer.val_check_interval", "trainer.log_every_n_steps", "data.block_size"]
    keys += ["callbacks.progress_bar", "model.n_layers", "optim.lr"]
    root = tmp_path / "many"
    for job in range(3):
        write_run(root, job, [f"{key}={job + 1}" for key in keys], 2.4 - job / 10)
    shown = compare([root, "--no-group"], tmp_path)
    assert shown.returncode == 0, shown.output
    assert _widest_line(shown.stdout) <= WIDTH, shown.stdout
    left_out = _left_out(shown.stdout)
    assert "final val/loss" not in left_out and "2.2" in shown.stdout
    assert [key for key in keys if key not in left_out], "the keys that fit show"
    assert [key for key in keys if key in left_out], "the others are named below the table"
