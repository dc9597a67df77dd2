"""Hydra's override grammar works on xfmr-train as on any Hydra app: sweeps written with
choice(...) and glob(...) run one job per choice, --config-dir adds a person's own configs, and a
choice no config file backs is refused in one line listing the valid ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from helpers.cli import run_cli
from helpers.runs import TINY
from xfmr.paths import config_dir

POSITIONS = sorted(p.stem for p in (config_dir() / "pos").glob("*.yaml"))
SHIPPED_EXPERIMENTS = sorted(p.stem for p in (config_dir() / "experiment").glob("*.yaml"))

# The smallest run that still trains and validates: one step, one validation batch.
ONE_STEP = [
    *TINY,
    "trainer.max_steps=1",
    "trainer.val_check_interval=1",
    "trainer.limit_val_batches=1",
    "logger=none",
    "callbacks.text_sample=null",
]

MINE = """\
# @package _global_
defaults:
  - override /pos: rotary
seed: 4242
optim:
  lr: 2.5e-3
"""


def _data(corpus: Path) -> list[str]:
    return ["data=text", f"data.path={corpus}"]


def _sweep(args: list[str], tmp_path: Path) -> list[dict]:
    """Run the multirun `args`; each job's saved config, in job order."""
    sweep = tmp_path / "sweep"
    result = run_cli(["-m", *args, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert result.returncode == 0, result.output
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir()), key=lambda p: int(p.name))
    assert [p.name for p in jobs] == [str(i) for i in range(len(jobs))]
    return [OmegaConf.load(job / "config.yaml") for job in jobs]


def _own_config_dir(tmp_path: Path) -> Path:
    """A person's config directory with one experiment of their own, experiment/mine.yaml."""
    mine = tmp_path / "my_conf" / "experiment" / "mine.yaml"
    mine.parent.mkdir(parents=True)
    mine.write_text(MINE)
    return mine.parents[1]


def _fails_in_one_line(result, *needles: str) -> str:
    assert result.returncode != 0, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("xfmr-train: error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


def test_choice_and_filtered_glob_run_one_job_per_choice(tmp_path: Path, corpus: Path) -> None:
    configs = _sweep(
        [*ONE_STEP, *_data(corpus), "pos=choice(learned,rotary)", "arch=glob(*coder,exclude=enc*)"],
        tmp_path,
    )
    assert [(c.model.pos.name, c.model.arch) for c in configs] == [
        ("learned", "decoder"),
        ("rotary", "decoder"),
    ]


def test_glob_star_runs_every_positional_scheme(tmp_path: Path, corpus: Path) -> None:
    # Hydra's own sweeper and launcher run the jobs in this one process: torch loads once.
    in_process = ["hydra/sweeper=basic", "hydra/launcher=basic"]
    configs = _sweep([*in_process, *ONE_STEP, *_data(corpus), "pos=glob(*)"], tmp_path)
    assert [c.model.pos.name for c in configs] == POSITIONS
    assert len(POSITIONS) >= 6


def test_own_experiment_from_config_dir_trains(tmp_path: Path, corpus: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "--config-dir",
            str(_own_config_dir(tmp_path)),
            "experiment=mine",
            *ONE_STEP,
            *_data(corpus),
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    config = OmegaConf.load(run_dir / "config.yaml")
    assert (config.model.pos.name, config.seed, config.optim.lr) == ("rotary", 4242, 2.5e-3)
    assert (run_dir / "results.json").is_file()


@pytest.mark.parametrize("form", [["--config-dir", "{}"], ["--config-dir={}"], ["-cd", "{}"]])
def test_unknown_experiment_lists_shipped_and_own(tmp_path: Path, form: list[str]) -> None:
    own = str(_own_config_dir(tmp_path))
    args = [part.format(own) for part in form]
    line = _fails_in_one_line(
        run_cli([*args, "experiment=nope", *ONE_STEP], tmp_path), "experiment='nope'"
    )
    listed = line.split("valid: ")[1].split(", ")
    assert listed == sorted([*SHIPPED_EXPERIMENTS, "mine"])


def test_experiment_in_a_subfolder_of_config_dir_is_found(tmp_path: Path) -> None:
    own = _own_config_dir(tmp_path)
    (own / "experiment" / "long").mkdir()
    (own / "experiment" / "long" / "mine.yaml").write_text("# @package _global_\nseed: 777\n")
    result = run_cli(["-cd", str(own), "experiment=long/mine", "--cfg", "job"], tmp_path)
    assert result.returncode == 0, result.output
    assert OmegaConf.create(result.stdout).seed == 777


def test_own_experiment_is_unknown_without_its_config_dir(tmp_path: Path) -> None:
    _fails_in_one_line(
        run_cli(["experiment=mine", *ONE_STEP], tmp_path),
        "experiment='mine'",
        ", ".join(SHIPPED_EXPERIMENTS),
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-m", "pos=choice(learned,nope)"], "pos='nope' is not a choice"),
        (["-m", "pos=glob(zzz*)"], "pos=glob(zzz*) matches no choice"),
        (["-m", "pos=range(1,3)"], "pos='1' is not a choice"),
        (["+pos=nope"], "pos='nope' is not a choice"),
        (["++pos=nope"], "pos='nope' is not a choice"),
        (["pos=[learned,nope]"], "pos='nope' is not a choice"),
    ],
)
def test_sweep_naming_a_missing_choice_fails_listing_choices(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    # Flags before the overrides: Hydra's command line takes its overrides as one run of words.
    result = run_cli([*args, *ONE_STEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    _fails_in_one_line(result, needle, f"valid: {', '.join(POSITIONS)}")
    assert not (tmp_path / "sweep").exists()


def test_what_the_grammar_cannot_read_is_named_in_one_line(tmp_path: Path) -> None:
    result = run_cli(["pos=choice(learned", *ONE_STEP], tmp_path)
    assert result.returncode == 2
    [line] = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("xfmr-train: error: could not read 'pos=choice(learned'"), line
    assert "quote a value" in line


def test_xfmr_train_reads_the_flags_hydras_main_reads() -> None:
    """xfmr-train reads the command line before Hydra does (`hydra_parser`): the same flags,
    each taking a value or not as Hydra's own parser (internal to Hydra) has them."""
    from hydra._internal.utils import get_args_parser

    from xfmr.cli.train import hydra_parser

    def flags(parser) -> dict[str, tuple]:
        return {
            flag: (action.nargs, tuple(action.choices or ()), action.const)
            for action in parser._actions
            for flag in action.option_strings
            if flag != "--version"  # Hydra prints its version; xfmr-train hands it to Hydra
        }

    assert flags(hydra_parser()) == flags(get_args_parser())
