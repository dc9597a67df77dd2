"""`xfmr-train --check`: every check a run makes, and the config it would train with printed,
without training; the checks that need files refuse before anything is printed or built;
Hydra's `--cfg job` prints only a config a run would take; and a run is checked once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from helpers.cli import run_cli
from helpers.runs import CORPUS, TINY


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS)
    return path


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_check_prints_the_config_it_would_train_with_and_trains_nothing(
    tmp_path: Path, corpus: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["--check", *TINY, "data=text", f"data.path={corpus}", f"hydra.run.dir={run_dir}"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.output
    printed = yaml.safe_load(result.output)
    assert printed["trainer"]["max_steps"] == 4 and printed["trainer"]["precision"] == "32-true"
    assert printed["paths"]["output_dir"] == str(run_dir)
    assert printed["resolved"]["trainer.precision"] == "auto"
    assert not run_dir.exists(), "nothing made, nothing trained"


@pytest.mark.parametrize(
    ("args", "starts"),
    [
        (["--check", "objective=span_corruption"], "objective=span_corruption cannot train arch=decoder"),
        (["--cfg", "job", "objective=span_corruption"], "objective=span_corruption cannot train arch=decoder"),
        (["init_from=/nonexistent"], "init_from='/nonexistent' does not exist"),
        (["ckpt_path=/nonexistent.ckpt"], "ckpt_path='/nonexistent.ckpt' does not exist"),
        (["trainer.max_step=5"], "trainer.max_step is not a trainer key: did you mean trainer.max_steps"),
        (["--check", "-m", "optim.lr=1,2"], "--check checks one run"),
        (["pos=learned,rotary"], "'pos=learned,rotary' gives several values, a sweep: add -m"),
        (["--check", "+callbacks.bar._target_=xfmr.training.callbacks.StepProgressBar"], "callbacks.bar._target_=xfmr.training.callbacks.StepProgressBar: no such class or function; it is xfmr.training.progress_bars.StepProgressBar"),
    ],
)  # fmt: skip
def test_a_refusal_is_one_line_before_anything_is_printed_or_made(
    tmp_path: Path, args: list[str], starts: str
) -> None:
    result = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 2, result.output
    assert _lines(result.output) == [_lines(result.output)[0]], "one line, no config tree"
    assert _lines(result.output)[0].startswith(f"xfmr-train: error: {starts}"), result.output
    assert not (tmp_path / "run").exists()


def test_a_run_is_checked_once(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the command line to the fitted run, the config is read and checked once."""
    import xfmr.config.make as make
    from xfmr.cli import train

    calls = []
    checked = make.check_across
    monkeypatch.setattr(make, "check_across", lambda config: calls.append(1) or checked(config))
    args = [*TINY, "data=text", f"data.path={corpus}", "callbacks.text_sample=null"]
    monkeypatch.setattr(sys, "argv", ["xfmr-train", *args, f"hydra.run.dir={tmp_path / 'run'}"])
    monkeypatch.chdir(tmp_path)
    train.main()
    assert (tmp_path / "run" / "results.json").is_file()
    assert calls == [1]


@pytest.mark.parametrize(
    ("args", "starts"),
    [
        (["data=text", "data.path=/nonexistent"], "data.path='/nonexistent' does not exist"),
        (["init_from=/nonexistent"], "init_from='/nonexistent' does not exist"),
    ],
)
def test_a_grid_whose_first_job_is_refused_starts_no_job(
    tmp_path: Path, args: list[str], starts: str
) -> None:
    """The first job of a grid is made and checked as it will run, before the sweep starts:
    a mistake every job would make is one line, not a failed job after another. (The test's
    CLI runs as `python -m xfmr.cli.train` does, as `__main__`.)"""
    sweep = tmp_path / "sweep"
    result = run_cli(
        ["-m", *TINY, *args, "pos=learned,rotary", f"hydra.sweep.dir={sweep}"], tmp_path
    )
    assert result.returncode == 2, result.output
    assert len(_lines(result.output)) == 1, result.output
    assert _lines(result.output)[0].startswith(f"xfmr-train: error: {starts}"), result.output
    assert not sweep.exists(), "no job started"
