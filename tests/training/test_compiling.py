"""`compile`'s modes, compile=auto's choice, and the compiled training step's fallbacks: a batch
shape past the CUDA graphs it records, or a compile that fails, runs eagerly with one line instead
of failing mid-run. torch.compile itself is replaced by a recorder here;
tests/training/test_throughput.py compiles for real."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import xfmr
from helpers.runs import CORPUS, TINY
from xfmr.config.options import compile_mode
from xfmr.errors import UserError
from xfmr.training import compiling
from xfmr.training import run as training_run
from xfmr.training.compiling import MAX_GRAPHS, CompiledStep, auto_mode


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (False, None),
        (True, "default"),
        ("reduce-overhead", "reduce-overhead"),
        ("max-autotune", "max-autotune"),
        ("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs"),
        (None, None),
        ("auto", "auto"),  # chosen by the run: compile_chosen
    ],
)
def test_compile_names_torch_compile_s_mode(value, mode) -> None:
    assert compile_mode(value) == mode


def test_an_unknown_compile_mode_is_refused_naming_the_key_and_the_modes() -> None:
    with pytest.raises(UserError) as refused:
        compile_mode("fast")
    message = str(refused.value)
    assert "compile='fast'" in message
    assert all(mode in message for mode in ("true", "reduce-overhead", "max-autotune"))


class Recorder:
    """Stands for torch.compile: records the mode and the batches the compiled step ran."""

    def __init__(self, fail: bool = False) -> None:
        self.modes: list[str] = []
        self.ran: list[tuple] = []
        self.fail = fail

    def __call__(self, step, *, mode: str):
        self.modes.append(mode)

        def compiled(model, batch):
            if self.fail:
                raise torch._dynamo.exc.TorchDynamoException("backend failed\nmore detail")
            self.ran.append(tuple(batch["input_ids"].shape))
            return step(model, batch)

        return compiled


def _eager(model, batch):
    return ("eager", tuple(batch["input_ids"].shape))


def _batch(length: int) -> dict[str, torch.Tensor]:
    return {"input_ids": torch.zeros(2, length, dtype=torch.long)}


# torch's max-autotune records CUDA graphs as reduce-overhead does (`triton.cudagraphs`).
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graphs_run_shapes_past_their_graphs_eagerly_said_once(
    monkeypatch, caplog, mode
) -> None:
    assert torch._inductor.list_mode_options(mode).get("triton.cudagraphs")
    recorder = Recorder()
    monkeypatch.setattr(compiling.torch, "compile", recorder)
    step = CompiledStep(_eager, mode)
    lengths = [*range(1, MAX_GRAPHS + 1), MAX_GRAPHS + 1, MAX_GRAPHS + 2, 1]
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        for length in lengths:
            step(None, _batch(length))
    assert recorder.modes == [mode]
    # The first MAX_GRAPHS shapes compiled (and a known one again), the new ones after eager.
    assert recorder.ran == [(2, n) for n in range(1, MAX_GRAPHS + 1)] + [(2, 1)]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"compile={mode}:" in lines[0] and "compile=true" in lines[0]
    assert "input_ids [2, 5]" in lines[0]


@pytest.mark.parametrize("mode", ["default", "max-autotune-no-cudagraphs"])
def test_modes_without_cuda_graphs_compile_every_shape(monkeypatch, mode) -> None:
    assert not torch._inductor.list_mode_options(mode).get("triton.cudagraphs")
    recorder = Recorder()
    monkeypatch.setattr(compiling.torch, "compile", recorder)
    step = CompiledStep(_eager, mode)
    for length in range(1, 2 * MAX_GRAPHS):
        step(None, _batch(length))
    assert len(recorder.ran) == 2 * MAX_GRAPHS - 1


def test_a_compile_that_fails_goes_on_eagerly_in_one_line(monkeypatch, caplog) -> None:
    monkeypatch.setattr(compiling.torch, "compile", Recorder(fail=True))
    step = CompiledStep(_eager, "max-autotune")
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        assert step(None, _batch(3)) == ("eager", (2, 3))
        assert step(None, _batch(3)) == ("eager", (2, 3))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "compile=max-autotune failed (backend failed)" in lines[0]
    assert "\n" not in lines[0]


def test_auto_chooses_cuda_graphs_for_one_gpu_and_fixed_shapes_and_says_so() -> None:
    mode, line = auto_mode(cuda=True, processes=1, fixed_shapes=True)
    assert mode == "reduce-overhead"
    assert "compile=reduce-overhead" in line and "compile=false" in line and "\n" not in line


@pytest.mark.parametrize(
    ("processes", "fixed", "why"),
    [(1, False, "batches vary in shape"), (2, True, "several processes"), (None, True, "")],
)
def test_auto_runs_eagerly_elsewhere_on_a_gpu_and_names_the_value_that_compiles(
    processes, fixed, why
) -> None:
    mode, line = auto_mode(cuda=True, processes=processes, fixed_shapes=fixed)
    assert mode is None
    assert why in line and "compile=true" in line


def test_auto_is_eager_and_quiet_on_a_cpu() -> None:
    assert auto_mode(cuda=False, processes=1, fixed_shapes=True) == (None, None)


@pytest.mark.parametrize(
    ("cuda", "overrides", "fixed", "chosen"),
    [
        (False, [], True, None),
        (True, [], True, "reduce-overhead"),  # devices=auto: every GPU, one here
        (True, [], False, None),
        (True, ["trainer.devices=2"], True, None),
    ],
)
def test_the_run_records_auto_s_choice_with_what_was_given(
    tmp_path: Path, monkeypatch, caplog, cuda, overrides, fixed, chosen
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(CORPUS)
    monkeypatch.setattr(training_run, "cuda_available", lambda: cuda)
    monkeypatch.setattr(training_run.torch.cuda, "device_count", lambda: 1)
    config = xfmr.compose(*TINY, "data=text", "data.path=corpus.txt").config
    assert config.compile == "auto"  # the default
    parts = SimpleNamespace(datamodule=SimpleNamespace(fixed_batch_shape=fixed))
    # the config's own device check ran on this CPU; here only the run's choice is asked
    config = config.replace(trainer=config.trainer.with_settings(**_settings(overrides)))
    with caplog.at_level(logging.INFO, logger="xfmr"):
        done = training_run.compile_chosen(config, parts, say=True)
    assert done.compile == chosen and done.resolved["compile"] == "auto"
    assert done.to_dict()["compile"] == (chosen or False)  # config.yaml: a value that resumes
    lines = [r.getMessage() for r in caplog.records if "compile=auto" in r.getMessage()]
    assert len(lines) == (1 if cuda else 0)


def _settings(overrides: list[str]) -> dict:
    return {k.removeprefix("trainer."): int(v) for k, v in (o.split("=") for o in overrides)}


def test_the_text_corpus_says_its_training_batches_have_one_shape() -> None:
    from xfmr.data.text import TextCorpusDataModule

    assert TextCorpusDataModule.fixed_batch_shape is True


@pytest.mark.parametrize(("value", "marked"), [("max-autotune", True), ("true", False)])
def test_each_step_is_marked_for_cuda_graphs_under_the_modes_that_record_them(
    tmp_path: Path, monkeypatch, value, marked
) -> None:
    """Under CUDA graphs a new graph replay overwrites the last one's outputs; the step says
    where a step begins (torch.compiler.cudagraph_mark_step_begin) under every mode that
    records them, max-autotune included, and only there. torch.compile is the recorder here."""
    from helpers.config import compose_config
    from xfmr.training.run import run_training

    (tmp_path / "corpus.txt").write_text(CORPUS)
    monkeypatch.setattr(compiling.torch, "compile", Recorder())
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    overrides = [*TINY, "data=text", f"data.path={tmp_path / 'corpus.txt'}", f"compile={value}"]
    run_training(compose_config(tmp_path, [*overrides, "trainer.accumulate_grad_batches=2"]))
    assert len(marks) == (4 * 2 if marked else 0)  # every micro-batch of the 4 steps
