"""xfmr from Python: `xfmr.compose`, `xfmr.train`, `xfmr.Run`, `xfmr.compare`, through the same
checks and code as the command line, and with a notebook's manners (the caller's config and
logging left as they were, Ctrl-C stopping as SIGINT does)."""

from __future__ import annotations

import _thread
import csv
import dataclasses
import io
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest

import xfmr
from helpers.cli import run_cli
from helpers.runs import CORPUS, TINY, TinyRun
from xfmr.errors import RunFailed, RunInterrupted, UserError

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(root: Path, *extra: str) -> list[str]:
    """A run of four steps on a corpus written under `root`, its directory `root/run`."""
    corpus = root / "corpus.txt"
    if not corpus.exists():
        corpus.write_text(CORPUS)
    return [
        *(o for o in TINY if not o.startswith("print_config")),
        "data=text",
        f"data.path={corpus}",
        "callbacks.text_sample=null",
        "throughput.peak_tflops=1",  # no peak measurement on a busy test machine
        f"paths.cache_dir={root / '.cache'}",
        f"hydra.run.dir={root / 'run'}",
        *extra,
    ]


@pytest.fixture
def finished(tiny_run: TinyRun) -> xfmr.Run:
    return xfmr.open_run(tiny_run.dir)


def test_import_xfmr_and_compose_load_neither_torch_nor_lightning() -> None:
    probe = (
        "import sys, xfmr\n"
        "import xfmr.api.training\n"  # as xfmr-train does, before anyone asks for a name
        "assert xfmr.compose is xfmr.compose is xfmr.api.compose and callable(xfmr.compose)\n"
        "assert callable(xfmr.compare) and callable(xfmr.compare)\n"
        "xfmr.compose('size=tiny')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'pandas'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "overrides",
    [
        ["pos=rotaryy"],
        ["size=tiny", "model.n_heads=3"],
        ["data=text"],
        ["generation=beam"],
        ["data.block_size=2048"],
    ],
    ids=["choice", "heads", "data", "other-tool", "positions"],
)
def test_compose_refuses_with_the_command_lines_message(
    tmp_path: Path, overrides: list[str]
) -> None:
    with pytest.raises(UserError) as refused:
        xfmr.compose(*overrides, f"hydra.run.dir={tmp_path / 'run'}")
    message = str(refused.value)
    assert "\n" not in message
    cli = run_cli([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert cli.returncode == 2
    assert f"xfmr-train: error: {message}" in cli.stderr, cli.stderr
    assert not (tmp_path / "run").exists()


def test_an_unknown_key_is_one_line_naming_it() -> None:
    with pytest.raises(
        UserError, match=r"model\.d_modle is not a model key: did you mean model\.d_model"
    ) as refused:
        xfmr.compose("model.d_modle=64")
    assert "\n" not in str(refused.value)


def test_compose_resolves_paths_as_the_command_line_and_hands_out_distinct_run_dirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("XFMR_CACHE_DIR", raising=False)
    first, second = xfmr.compose("size=tiny"), xfmr.compose("size=tiny")
    assert first.config.paths.root_dir == str(tmp_path)
    assert first.config.paths.cache_dir == f"{tmp_path}/.cache/xfmr"
    assert first.run_dir.parent == tmp_path / "outputs" / "train" / "runs"
    assert first.run_dir != second.run_dir, "composed in the same second, each its own run"
    given = xfmr.compose("size=tiny", "hydra.run.dir=mine", "optim.lr=0.01")
    assert given.run_dir == tmp_path / "mine"
    assert given.overrides == ("size=tiny", "optim.lr=0.01")  # hydra.* is Hydra's own
    assert "hydra" not in given.config.to_dict()


def test_config_dir_is_searched_as_xfmr_train_searches_it(tmp_path: Path) -> None:
    own = tmp_path / "my_configs" / "experiment"
    own.mkdir(parents=True)
    (own / "mine.yaml").write_text("# @package _global_\nmodel:\n  n_layers: 1\n")
    composed = xfmr.compose("size=tiny", "experiment=mine", config_dir=tmp_path / "my_configs")
    assert composed.config.model.n_layers == 1 and composed.config.model.d_model == 64
    with pytest.raises(UserError, match=r"experiment='mine' is not a choice.*valid: bert_conll"):
        xfmr.compose("experiment=mine")
    with pytest.raises(UserError, match="config_dir="):
        xfmr.compose("experiment=mine", config_dir=tmp_path / "absent")


def _logging_state() -> list[tuple]:
    names = ("", "xfmr", "lightning", "lightning.pytorch", "lightning.fabric")
    loggers = [logging.getLogger(name) for name in names]
    return [
        (
            lg.level,
            lg.propagate,
            [(h, tuple(h.filters)) for h in lg.handlers],
        )
        for lg in loggers
    ]


def test_two_trainings_leave_the_callers_config_and_logging_as_they_were(tmp_path: Path) -> None:
    before = _logging_state()
    runs = []
    for name, pos in (("a", "learned"), ("b", "rotary")):
        experiment = xfmr.compose(*tiny(tmp_path, f"pos={pos}", f"hydra.run.dir={tmp_path / name}"))
        as_composed = experiment.config.to_dict()
        runs.append(xfmr.train(experiment))
        assert experiment.config.to_dict() == as_composed
        assert _logging_state() == before
    for run, name in zip(runs, "ab", strict=True):
        assert run.path == tmp_path / name and run.status == "completed"
        assert run.results["step"] == 4
        assert list(run.history.index) == [2, 4] and "val/loss" in run.history.columns
        assert run.overrides == [o for o in run.overrides if not o.startswith("hydra.")]
        log = (run.path / "train.log").read_text()
        assert "run directory:" in log and "[xfmr][INFO]" in log
    assert "pos=rotary" in runs[1].overrides and "val/loss" in repr(runs[1])


def test_a_refused_config_leaves_no_run_directory_and_the_config_as_given(tmp_path: Path) -> None:
    experiment = xfmr.compose(*tiny(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):  # checked once: compose again instead
        experiment.config.model.n_heads = 3  # type: ignore[misc]
    with pytest.raises(UserError, match="not divisible by n_heads=3"):
        xfmr.compose(*tiny(tmp_path, "model.n_heads=3"))
    # Refused once the run knows its vocabulary: no width comes near so few parameters.
    small = xfmr.compose(*tiny(tmp_path, "model.target_params=30"))
    with pytest.raises(UserError, match="model.target_params=30: no model.d_model"):
        xfmr.train(small)
    assert small.config.model.target_params == 30
    assert not (tmp_path / "run").exists()
    with pytest.raises(UserError, match="takes an experiment from xfmr.compose"):
        xfmr.train(experiment.config)


def test_a_failed_run_raises_with_the_run_and_its_reason(tmp_path: Path) -> None:
    with pytest.raises(RunFailed, match="loss is nan") as failed:
        xfmr.train(xfmr.compose(*tiny(tmp_path, "optim.lr=1e30")))
    assert failed.value.run.status == "failed"
    assert "loss is nan" in failed.value.run.results["reason"]


class InterruptAt(L.Callback):
    """Ctrl-C at the end of step `step`, once: a KeyboardInterrupt raised in the process, or
    SIGINT delivered to it as a notebook's stop button does (`_thread.interrupt_main`)."""

    fired = False

    def __init__(self, step: int, how: str) -> None:
        self.step, self.how = step, how

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and not InterruptAt.fired:
            InterruptAt.fired = True
            if self.how == "raise":
                raise KeyboardInterrupt
            _thread.interrupt_main(signal.SIGINT)


@pytest.mark.parametrize("how", ["raise", "signal"])
def test_ctrl_c_stops_with_a_checkpoint_and_training_again_resumes(
    tmp_path: Path, how: str
) -> None:
    InterruptAt.fired = False
    handler = signal.getsignal(signal.SIGINT)
    interrupt = [
        f"+callbacks.interrupt._target_={__name__}.InterruptAt",
        "+callbacks.interrupt.step=1",
        f"+callbacks.interrupt.how={how}",
    ]
    with pytest.raises(RunInterrupted, match="stopped after step") as stopped:
        xfmr.train(xfmr.compose(*tiny(tmp_path, *interrupt)))
    assert "train the same experiment again" in str(stopped.value)
    run = stopped.value.run
    assert run.status == "interrupted"
    assert (run.path / "checkpoints" / "last.ckpt").is_file()
    assert signal.getsignal(signal.SIGINT) is handler, "SIGINT works in the kernel afterwards"
    resumed = xfmr.train(xfmr.compose(*tiny(tmp_path)))
    assert resumed.path == run.path and resumed.status == "completed"
    assert resumed.results["resumed_from"].endswith("last.ckpt")
    assert resumed.results["step"] == 4


def test_a_finished_run_generates_evaluates_draws_and_exports(
    tiny_run: TinyRun, tmp_path: Path
) -> None:
    run = xfmr.open_run(tiny_run.copy(tmp_path / "finished"))  # evaluating writes eval.json
    text = run.generate("the quick", max_new_tokens=5)
    assert isinstance(text, str) and text
    both = run.generate(["the quick", "a small"], max_new_tokens=5)
    assert len(both) == 2 and all(isinstance(t, str) for t in both)
    assert len(run.generate("the", generation="beam", n_best=2, max_new_tokens=3)) == 2
    with pytest.raises(UserError, match="generation.num_beems is not a generation setting"):
        run.generate("the", num_beems=2)
    with pytest.raises(UserError, match="generation='bean' is not a choice"):
        run.generate("the", generation="bean")

    report = run.evaluate()
    assert report["loss"] > 0 and json.loads((run.path / "eval.json").read_text()) == report

    maps = run.attention("the quick", out=tmp_path / "maps")
    assert len(maps) == 2 * 2  # size=tiny: 2 layers x 2 heads
    assert maps[0].weights.shape == (len(maps[0].queries), len(maps[0].keys))
    assert type(maps[0].figure()).__name__ == "Figure"
    assert len(list((tmp_path / "maps").glob("*.png"))) == len(maps)

    exported = run.export(tmp_path / "model.safetensors")
    assert exported.is_file() and (tmp_path / "tokenizer.json").is_file()
    with pytest.raises(UserError, match="format='onnx' is not one of"):
        run.export(format="onnx")


def test_opening_what_is_not_a_run_says_what_the_directory_holds(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UserError, match="not a run directory written by xfmr-train.*notes.txt"):
        xfmr.open_run(tmp_path)


def test_compare_gives_xfmr_compares_table_as_a_dataframe(
    finished: xfmr.Run, tmp_path: Path
) -> None:
    other = xfmr.train(xfmr.compose(*tiny(tmp_path, "pos=rotary")))
    table = xfmr.compare(finished, other)
    cli = run_cli(
        [str(finished.path), str(other.path), "--format", "csv"],
        tmp_path,
        module="xfmr.cli.compare",
    )
    assert cli.returncode == 0, cli.output
    rows = list(csv.DictReader(io.StringIO(cli.stdout)))
    assert list(table.columns) == list(rows[0])
    assert list(table["run"]) == [row["run"] for row in rows]
    assert table.attrs["metric"] == "val/loss" and table.attrs["mode"] == "min"
    assert set(table["pos"].fillna("")) >= {"rotary"}
    assert list(xfmr.compare([finished.path, other.path])["run"]) == list(table["run"])


def test_a_finished_run_trained_again_keeps_its_results_and_one_entry_per_validation(
    tmp_path: Path,
) -> None:
    """Five steps validated every two: the last validation (step 5, not a validation step)
    is recorded once, and training the finished run again trains nothing and keeps its final
    metrics (it once wrote empty ones)."""
    experiment = xfmr.compose(*tiny(tmp_path, "trainer.max_steps=5"))
    first = xfmr.train(experiment).results
    assert [h["step"] for h in first["history"]] == [2, 4, 5]
    again = xfmr.train(experiment).results
    assert again["status"] == "completed" and again["step"] == 5
    assert again["metrics"]["val/loss"] == first["metrics"]["val/loss"]
    assert again["history"] == first["history"]
