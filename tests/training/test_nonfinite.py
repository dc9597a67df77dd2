"""A loss or gradient that stops being a number stops the run at that step, naming it and the last
finite loss, with the checkpoints from before it; `nonfinite.max_skips` skips that many such
steps whole (no update, no schedule step) first."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from helpers import helpers_env
from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.numeric_faults import finite_weights
from helpers.runs import TINY, read_results
from xfmr.errors import RunFailed

pytestmark = pytest.mark.usefixtures("one_thread")


def _fault(name: str, steps: list[int]) -> str:
    return f"+callbacks.{name}={{_target_: helpers.numeric_faults.{name}, steps: {steps}}}"


def _train(tmp_path: Path, overrides: list[str]) -> dict:
    from xfmr.training.run import run_training

    record = tmp_path / "steps.json"
    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            "trainer.max_steps=5",
            "trainer.val_check_interval=5",
            "schedule.warmup_steps=5",  # the lr changes every step
            "callbacks.text_sample=null",
            f"+callbacks.record={{_target_: helpers.numeric_faults.RecordSteps, path: '{record}'}}",
            *overrides,
        ],
    )
    return run_training(cfg)


def _steps(tmp_path: Path) -> dict[int, dict]:
    return {int(k): v for k, v in json.loads((tmp_path / "steps.json").read_text()).items()}


def test_nan_loss_stops_the_run_at_its_step_with_the_checkpoints_from_before(
    tmp_path: Path, corpus: Path
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            *TINY,
            "data=text",
            f"data.path={corpus}",
            "trainer.max_steps=6",
            "logger=none",
            "callbacks.text_sample=null",
            f"hydra.run.dir={run_dir}",
            _fault("NanLossAt", [3]),
        ],
        tmp_path,
        env=helpers_env(),
    )
    assert result.returncode == 1, result.output
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    message = errors[0]
    assert "the loss is nan at step 3" in message
    assert "the last finite loss was" in message and "at step 2" in message
    assert "optim.lr" in message and "trainer.precision" in message
    results = read_results(run_dir)
    assert results["status"] == "failed" and results["reason"] in message
    assert results["skipped_steps"] == []
    for name in ("last", "best"):  # saved at step 2's validation, before the bad step
        checkpoint = torch.load(run_dir / "checkpoints" / f"{name}.ckpt", weights_only=False)
        assert checkpoint["global_step"] == 2, name
        assert finite_weights(checkpoint), name


@pytest.mark.parametrize("fused", [True, False])
def test_skipped_steps_leave_weights_optimizer_and_schedule_as_they_were(
    tmp_path: Path, fused: bool
) -> None:
    # Every step a logging step: the guard's record is read at each, the schedule wound back at
    # once. A fused AdamW leaves the step out on the device; the per-tensor one, whose verdict
    # is read every step, on the host. Either way the skipped steps count toward max_steps.
    results = _train(
        tmp_path,
        [
            "nonfinite.max_skips=2",
            "trainer.log_every_n_steps=1",
            f"optim.fused={str(fused).lower()}",
            _fault("NanLossAt", [1, 3]),
        ],
    )
    assert results["status"] == "completed" and results["step"] == 5
    assert results["skipped_steps"] == [1, 3]
    assert math.isfinite(results["metrics"]["val/loss"])
    steps = _steps(tmp_path)
    for step, state in steps.items():
        before, after = state["before"], state["after"]
        if step in (1, 3):  # a true skip: AdamW's moments, step count and the lr untouched
            assert after == before, step
        else:
            assert after["optimizer_steps"] == before["optimizer_steps"] + 1, step
            assert after["weights"] != before["weights"] and after["lr"] != before["lr"], step
    assert steps[4]["after"]["optimizer_steps"] == 3


def test_a_skip_read_at_a_later_logging_step_is_left_out_at_once_and_from_the_schedule(
    tmp_path: Path,
) -> None:
    """The guard's record read every 4 steps: the bad update is left out on the device at its
    own step; the schedule, wound back when the record is read (step 3), ran one step ahead in
    between (step 2) and ends where a run read at every step ends."""
    runs = {}
    for every in (1, 4):
        (tmp_path / str(every)).mkdir()
        overrides = ["nonfinite.max_skips=1", f"trainer.log_every_n_steps={every}"]
        results = _train(tmp_path / str(every), [*overrides, _fault("NanLossAt", [1])])
        assert results["status"] == "completed" and results["skipped_steps"] == [1]
        runs[every] = _steps(tmp_path / str(every))
    every_step, deferred = runs[1], runs[4]
    before, after = deferred[1]["before"], deferred[1]["after"]
    assert after["weights"] == before["weights"]
    assert after["optimizer_steps"] == before["optimizer_steps"]
    assert deferred[2]["before"]["lr"] == every_step[3]["before"]["lr"]  # one step ahead
    assert deferred[3]["after"]["lr"] == every_step[3]["after"]["lr"]  # wound back when read
    for key in ("lr", "optimizer_steps"):
        assert deferred[4]["after"][key] == every_step[4]["after"][key]
    assert deferred[4]["after"]["optimizer_steps"] == 4


def test_one_more_bad_step_than_max_skips_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(RunFailed) as failed:
        _train(tmp_path, ["nonfinite.max_skips=2", _fault("NanLossAt", [1, 2, 3])])
    message = str(failed.value)
    assert "the loss is nan at step 3" in message
    assert "the last finite loss was" in message and "at step 0" in message
    assert "steps [1, 2]" in message and "nonfinite.max_skips=2" in message
    results = read_results(tmp_path / "run")
    assert results["status"] == "failed" and results["skipped_steps"] == [1, 2]
    assert results["reason"] == message


def test_inf_gradient_with_a_finite_loss_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(RunFailed) as failed:
        _train(tmp_path, [_fault("InfGradientAt", [2])])
    message = str(failed.value)
    assert "the gradient of model." in message and "is inf at step 2" in message
    assert "where the loss is" in message and "the last finite loss was" in message
    assert read_results(tmp_path / "run")["status"] == "failed"
