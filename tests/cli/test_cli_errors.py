"""A person's mistakes end the run before training with one clear message and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import run_cli
from helpers.runs import TINY
from xfmr.paths import config_dir


def _heavy_modules_loaded(args: list[str], cwd: Path) -> list[str]:
    """Which of torch / lightning the CLI has imported by the time it exits with `args`:
    help and config mistakes must answer without them (Lightning alone takes seconds)."""
    probe = (
        "import sys\n"
        f"sys.argv = ['xfmr-train', *{args!r}]\n"
        "from xfmr.cli.train import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True)
    return eval(out.stdout.strip().splitlines()[-1])  # the printed list


def _fails_cleanly(result, *needles: str) -> None:
    assert result.returncode != 0, result.output
    assert "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


def test_help_lists_groups_and_choices_quickly(tmp_path: Path) -> None:
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0, result.output
    for group in ("arch", "pos", "objective", "data", "tokenizer", "trainer", "experiment"):
        choices = sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))
        assert f"{group}: {', '.join(choices)}" in result.stdout, group
    assert "pos: alibi, learned, none, relative, rotary, sinusoidal" in result.stdout
    assert _heavy_modules_loaded(["--help"], tmp_path) == [], "--help must not load torch/Lightning"


def _hydras_help(argv: list[str], capsys) -> str:
    """What Hydra's own `--help` prints for `argv`, in this process."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    import xfmr.cli.train as cli

    capsys.readouterr()
    saved = sys.argv
    sys.argv = ["xfmr-train", *argv]
    try:
        with pytest.raises(SystemExit):  # Hydra's help ends the process
            cli._train_app()
    finally:
        sys.argv = saved
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None  # as a new process would find it
    return capsys.readouterr().out


def test_help_is_hydras_help_written_from_the_config_files(tmp_path: Path, capsys) -> None:
    from xfmr.cli.train import help_text

    extra = tmp_path / "mine"
    (extra / "pos").mkdir(parents=True)
    (extra / "pos" / "mine.yaml").write_text("name: rotary\n")
    (extra / "probe" / "deep").mkdir(parents=True)
    (extra / "probe" / "deep" / "one.yaml").write_text("a: 1\n")
    for argv in (["--help"], ["--config-dir", str(extra), "--help"], ["size=tiny", "--help"]):
        ours = help_text(argv, config_dir())
        assert ours is not None, argv
        assert ours + "\n" == _hydras_help(argv, capsys), argv
    assert "pos: alibi, learned, mine, none" in help_text(
        ["--config-dir", str(extra), "--help"], config_dir()
    )
    # What only Hydra knows is left to it.
    for argv in (
        ["--hydra-help"],
        ["--help", "hydra/help=default"],
        ["--help", "hydra.searchpath=[file:///tmp]"],
        ["--cfg", "job"],
        ["a"],
    ):
        assert help_text(argv, config_dir()) is None, argv


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["pos=rotaryy"], ["pos='rotaryy'", "alibi, learned, none, relative, rotary, sinusoidal"]),
        (["-m", "arch=decoder,encodr"], ["arch='encodr'", "decoder"]),
        (["model.d_modle=64"], ["d_modle"]),
        (["size=tiny", "model.n_heads=3"], ["d_model=64", "n_heads=3", "[1, 2, 4, 8, 16, 32, 64]"]),
        (["data.block_size=2048"], ["data.block_size=2048", "pos.max_positions=1024"]),
        (["data=text"], ["data.path is not set"]),
        (
            ["data=text", "data.path=/nonexistent/input.txt"],
            ["data.path='/nonexistent/input.txt' does not exist"],
        ),
        (["tokenizer.kind=wordpeace"], ["tokenizer.kind='wordpeace'", "char", "byte_bpe"]),
        (["generation=beam"], ["generation is for xfmr-generate", "callbacks.text_sample"]),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    if args == ["model.d_modle=64"] and "COVERAGE_PROCESS_CONFIG" in os.environ:
        # Hydra reports its own override errors with a full traceback when a tracer is set.
        pytest.skip("under coverage's tracer Hydra prints the traceback of an override error")
    result = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}", *args], tmp_path)
    _fails_cleanly(result, *needles)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_empty_data_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = run_cli(
        [*TINY, "data=text", f"data.path={empty}", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path
    )
    _fails_cleanly(result, "is empty", str(empty))


def test_data_too_short_for_a_block(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("just a few words\n" * 3)
    result = run_cli(
        [*TINY, "data=text", f"data.path={short}", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path
    )
    _fails_cleanly(result, "data.block_size")


def test_bad_checkpoint_path(tmp_path: Path, corpus: Path) -> None:
    junk = tmp_path / "junk.ckpt"
    junk.write_text("not a checkpoint")
    base = [*TINY, "data=text", f"data.path={corpus}", f"hydra.run.dir={tmp_path / 'run'}"]
    _fails_cleanly(
        run_cli([*base, f"ckpt_path={tmp_path / 'missing.ckpt'}"], tmp_path), "does not exist"
    )
    _fails_cleanly(run_cli([*base, f"ckpt_path={junk}"], tmp_path), "not a readable checkpoint")


def test_config_mistakes_answer_before_torch_loads(tmp_path: Path) -> None:
    args = [*TINY, f"hydra.run.dir={tmp_path / 'run'}", "size=tiny", "model.n_heads=3"]
    assert _heavy_modules_loaded(args, tmp_path) == []
    assert _heavy_modules_loaded(["pos=rotaryy"], tmp_path) == []
