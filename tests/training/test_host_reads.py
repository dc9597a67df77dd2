"""A plain training step reads nothing back from the device and logs no Python number: the loss,
throughput, progress bar figures and the non-finite guard's verdict are read at logging steps
(`trainer.log_every_n_steps`) only. Counted on a CPU by wrapping every way a tensor becomes a
Python value; on a GPU, torch's sync debug mode turns any wait into an error."""

from __future__ import annotations

import json
import logging
import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch

from helpers.config import compose_config
from xfmr.training.cadence import is_logging_step

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
STEPS, EVERY = 25, 10
LOGGING_STEPS = {10, 20, 25}  # every 10th, and the last


class CountReads(L.Callback):
    """Counts reads of tensors back to Python, and what is logged (`LightningModule.log`, the
    logger's `log_metrics`), per optimizer step of training (validation left out), with
    whether the step is a logging step."""

    def __init__(self) -> None:
        self.reads: Counter[int] = Counter()
        self.logs: Counter[int] = Counter()
        self.logging: dict[int, bool] = {}
        self.trainer: L.Trainer | None = None
        self.step = 0  # the optimizer step under way, counted from 1
        self._saved: dict[str, object] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.trainer is None:
            self.trainer = trainer
            self._wrap(pl_module, type(trainer.loggers[0]))
        # Every step is listed, read or not; global_step counts it once the optimizer steps.
        self.step = trainer.global_step + 1
        self.logging[self.step] = is_logging_step(trainer, self.step)

    def _step(self) -> int | None:
        trainer = self.trainer
        if trainer is None or trainer.validating or trainer.sanity_checking:
            return None
        return self.step

    def _wrap(self, pl_module, logger: type) -> None:
        for name in READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._counting(original, self.reads))
        self._logging = [(type(pl_module), "log"), (logger, "log_metrics")]
        for owner, name in self._logging:  # logged through the module, or to the logger
            self._saved[name] = getattr(owner, name)
            setattr(owner, name, self._counting(self._saved[name], self.logs))

    def _counting(self, original, counter: Counter[int]):
        def counted(*args, **kwargs):
            step = self._step()
            # torch's non-fused optimizers read their step counts, which they keep on the host.
            if step is not None and "/torch/optim/" not in sys._getframe(1).f_code.co_filename:
                counter[step] += 1
            return original(*args, **kwargs)

        return counted

    def on_train_end(self, trainer, pl_module) -> None:
        for owner, name in self._logging:
            setattr(owner, name, self._saved.pop(name))
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self.trainer = None


def _count(tmp_path: Path, overrides: list[str]) -> CountReads:
    from xfmr.training import fitting as fit
    from xfmr.training import run

    counter = CountReads()
    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            f"trainer.max_steps={STEPS}",
            f"trainer.val_check_interval={STEPS}",
            f"trainer.log_every_n_steps={EVERY}",
            "logger=csv",
            "trainer.enable_progress_bar=true",
            "+callbacks.progress_bar._target_=xfmr.training.progress_bars.StepProgressBar",
            "callbacks.text_sample=null",
            *overrides,
        ],
    )
    fitting = fit._fitting
    fit._fitting = lambda callbacks, loggers, tokenizer: [
        counter,
        *fitting(callbacks, loggers, tokenizer),
    ]
    try:
        run.run_training(cfg)
    finally:
        fit._fitting = fitting
    return counter


def test_a_plain_step_reads_nothing_back_and_a_logging_step_does(tmp_path: Path) -> None:
    # A non-finite step among them (the 5th): its update is left out on the device, and the
    # guard's record read at step 10.
    counted = _count(
        tmp_path,
        [
            "nonfinite.max_skips=1",
            "+callbacks.fault={_target_: helpers.numeric_faults.NanLossAt, steps: [4]}",
        ],
    )
    assert {s for s, logging in counted.logging.items() if logging} == LOGGING_STEPS
    plain = [s for s, logging in counted.logging.items() if not logging]
    assert len(plain) == STEPS - len(LOGGING_STEPS)
    assert {s: counted.reads[s] for s in plain if counted.reads[s]} == {}
    assert {s: counted.logs[s] for s in plain if counted.logs[s]} == {}
    # The counter sees reads: the logging steps make them (loss, guard, loggers, bar).
    assert all(counted.reads[s] > 0 and counted.logs[s] > 0 for s in LOGGING_STEPS)
    results = (tmp_path / "run" / "results.json").read_text()
    assert '"skipped_steps": [\n    4\n  ]' in results


# callbacks.lm_eval scoring every 7th step and after the last: 7, 14, 21 and 25.
SCORED_STEPS = {7, 14, 21, 25}
SCORING = [
    "callbacks.lm_eval.tasks=xfmr_minimal_pairs_a_an",
    "callbacks.lm_eval.every_n_steps=7",
    "callbacks.lm_eval.limit=4",
]


def test_with_lm_eval_on_only_its_own_steps_read_more(tmp_path: Path) -> None:
    """The in-training scoring reads the device (its scores) at the steps it scores and
    nowhere else: a plain step, neither logging nor scored, reads nothing and logs nothing."""
    pytest.importorskip("lm_eval")
    counted = _count(tmp_path, SCORING)
    plain = [s for s, logging in counted.logging.items() if not (logging or s in SCORED_STEPS)]
    assert len(plain) == STEPS - len(LOGGING_STEPS | SCORED_STEPS)
    assert {s: counted.reads[s] for s in plain if counted.reads[s]} == {}
    assert {s: counted.logs[s] for s in plain if counted.logs[s]} == {}
    # The counter sees the scoring: a scored step that is no logging step reads and logs.
    assert all(counted.reads[s] > 0 and counted.logs[s] > 0 for s in SCORED_STEPS)
    history = json.loads((tmp_path / "run" / "results.json").read_text())["history"]
    assert sorted(row["step"] for row in history if any(k.startswith("eval/") for k in row)) == [
        *sorted(SCORED_STEPS)
    ]


def test_an_optimizer_that_cannot_skip_on_the_device_reads_once_a_step(
    tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="xfmr")
    counted = _count(tmp_path, ["optim.fused=false"])
    plain = [s for s, logging in counted.logging.items() if not logging]
    assert {counted.reads[s] for s in plain} == {1}  # the guard's verdict, and nothing else
    assert any("cannot leave a step out on the device" in r.message for r in caplog.records)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("lm_eval", [False, True], ids=["plain", "lm_eval"])
def test_a_plain_step_on_a_gpu_never_waits_for_it(tmp_path: Path, lm_eval: bool) -> None:
    """With callbacks.lm_eval on too: the steps after a scoring queue their work as before
    (the scoring itself runs after the step, where the debug mode is off)."""
    if lm_eval:
        pytest.importorskip("lm_eval")

    class NoWaits(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if not is_logging_step(trainer, trainer.global_step + 1):
                torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            torch.cuda.set_sync_debug_mode("default")

    from xfmr.training import fitting as fit
    from xfmr.training import run

    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            "trainer.accelerator=gpu",
            f"trainer.max_steps={STEPS}",
            f"trainer.val_check_interval={STEPS}",
            f"trainer.log_every_n_steps={EVERY}",
            "logger=csv",
            "callbacks.text_sample=null",
            *(SCORING if lm_eval else []),
        ],
    )
    fitting = fit._fitting
    fit._fitting = lambda *args: [NoWaits(), *fitting(*args)]
    try:
        results = run.run_training(cfg)
    finally:
        fit._fitting = fitting
        torch.cuda.set_sync_debug_mode("default")
    assert results["status"] == "completed" and results["step"] == STEPS
