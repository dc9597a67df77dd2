"""`callbacks.lm_eval`: lm-eval tasks scored on the model being trained, every N optimizer steps
and after the last, as nanochat scores its CORE tasks inside its training loop.

The model is the one in memory: `XfmrLM` over it (`in_memory_run`), no checkpoint written or
read. It is scored in eval mode without gradients, under the run's precision (Lightning's
`forward_context`, as a validation step is), and then every module's mode and every random
generator (Python's, numpy's, torch's CPU and CUDA ones, which lm-eval seeds) are put back: a run
with the callback takes the same steps as one without (tests/evaluation/test_in_training.py).

The scores go to every logger as `eval/<task>/<metric>` (with `_centred` where the task states
its chance: `xfmr.evaluation.harness.task_metrics`), into results.json's history entry of their
step and its metrics (`RunSummary.add_scores`), so `optimized_metric=eval/xfmr_minimal_pairs/acc`
ranks a sweep and its pruner judges trials on it at each validation. Their time is left out of
the training steps' timing, as a validation's is.

A step that is not due reads nothing from the device: whether it is due is arithmetic on the step
count. Rank 0 alone scores (the other processes of a DDP run go on to the next step and wait for
it at the gradient reduction); a sharded model (trainer=fsdp) is scored on every rank together,
as its forwards need, and rank 0 reports. Tasks are laid out once, when fitting starts, in a
temporary folder; their data is read once there.
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import nn

from xfmr.errors import UserError
from xfmr.evaluation.checks import check_task_settings, require_lm_eval, task_names
from xfmr.evaluation.harness import task_metrics
from xfmr.run_dir.files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LAST_CHECKPOINT,
    TOKENIZER_FILE,
    RunFiles,
)
from xfmr.runs.loading import LoadedRun
from xfmr.training.cadence import log_at_step
from xfmr.training.run_summary import RunSummary

log = logging.getLogger("xfmr")
# lm-eval's loggers, which say at INFO what they do for every call; quieter inside a run.
LM_EVAL_LOGGERS = ("lm_eval",)
# lm-eval's few-shot seed (simple_evaluate's default), for a task of one's own that draws some.
FEWSHOT_SEED = 1234


def in_memory_run(config: Any, parts: Any, model: nn.Module) -> LoadedRun:
    """A `LoadedRun` over the model being trained: the run's config, tokenizer and objective
    (`parts`), its weights those of `model` as they are when scored. `files` names the run's
    files; none is read."""
    run_dir = Path(config.run_dir)
    files = RunFiles(
        run_dir=run_dir,
        config=run_dir / CONFIG_FILE,
        tokenizer=run_dir / TOKENIZER_FILE,
        checkpoint=run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT,
    )
    return LoadedRun(
        files=files,
        config=config,
        tokenizer=parts.tokenizer,
        objective=parts.objective,
        model=model,
        model_config=parts.model_config,
        global_step=None,
    )


@contextmanager
def training_untouched(model: nn.Module) -> Iterator[None]:
    """Score `model` in eval mode without gradients; then put back each module's mode and
    every random generator the host keeps, so that training goes on as it would have."""
    modes = [(module, module.training) for module in model.modules()]
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextmanager
def quiet_lm_eval() -> Iterator[None]:
    """lm-eval's INFO lines, and its progress bars (tqdm's, on sys.stderr), which would break
    into the run's own bar at every call, left out; its warnings kept."""
    loggers = [logging.getLogger(name) for name in LM_EVAL_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class LmEval(L.Callback):
    """Scores lm-eval tasks on the model being trained every `every_n_steps` optimizer steps
    and after the last one (see the module's doc). Off while `tasks` names none.

    Args:
        tasks: task names (xfmr's shipped tasks, those of `tasks_dir`), a list or "a,b".
        every_n_steps: scored after every this many optimizer steps, and after the last.
        limit: questions per task each time (the first ones, the same every time), or a
            fraction of each task in (0, 1); None: all of them.
        batch_size: requests scored per forward.
        tasks_dir: a folder of lm-eval task YAMLs of one's own, or None.
    """

    def __init__(
        self,
        *,
        tasks: str | Sequence[str] | None = None,
        every_n_steps: int = 200,
        limit: int | float | None = 100,
        batch_size: int = 32,
        tasks_dir: str | Path | None = None,
    ) -> None:
        self.names = task_names(tasks) if tasks else []
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int):
            every_n_steps = -1
        if every_n_steps < 1:
            raise UserError(
                f"callbacks.lm_eval.every_n_steps={every_n_steps!r}: give a whole number >= 1"
            )
        self.every_n_steps = every_n_steps
        self.limit = limit
        self.batch_size = batch_size
        self.tasks_dir = Path(tasks_dir).expanduser() if tasks_dir else None
        if self.names:
            require_lm_eval()
            check_task_settings(limit=limit, batch_size=batch_size, num_fewshot=None)
        self.seconds: list[float] = []  # each scoring's wall seconds
        self._parts: tuple[Any, Any] | None = None  # (config, parts), from `use_run`
        self._lm: Any = None
        self._tasks: Any = None  # lm-eval's loaded tasks (TaskManager.load)
        self._chance: dict[str, float] = {}
        self._work_dir: tempfile.TemporaryDirectory | None = None

    def use_run(self, config: Any, parts: Any) -> None:
        """The run's config and parts, handed over before fitting
        (`xfmr.training.fitting.hand_run`)."""
        self._parts = (config, parts)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.names or stage != "fit" or not self._takes_part(trainer, pl_module):
            return
        if self._parts is None:
            raise UserError(
                "callbacks.lm_eval needs the run's config and parts (`use_run`), which "
                "xfmr-train hands it: use it through xfmr-train or xfmr.train"
            )
        if self._lm is None:
            self._prepare(in_memory_run(*self._parts, pl_module.model))

    def _prepare(self, run: LoadedRun) -> None:
        """The tasks laid out and loaded once, and lm-eval's model over `run`."""
        from xfmr.evaluation.harness import preparer, task_manager
        from xfmr.evaluation.lm_model import XfmrLM

        self._lm = XfmrLM(run, batch_size=self.batch_size)
        self._work_dir = tempfile.TemporaryDirectory(prefix="xfmr-lm-eval-")
        work_dir = Path(self._work_dir.name)
        prepared = preparer()(run, self.names, tasks_dir=self.tasks_dir, work_dir=work_dir)
        with quiet_lm_eval():
            self._tasks = task_manager(prepared.include_path, prepared.names).load(
                list(prepared.names)
            )
        for task in self._tasks["tasks"].values():  # as simple_evaluate sets them
            if task.get_config("num_fewshot") is None:
                task.set_config(key="num_fewshot", value=0)
            task.set_fewshot_seed(seed=FEWSHOT_SEED)
        self._chance = prepared.chance

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._work_dir is not None:
            self._work_dir.cleanup()
        self._work_dir = self._lm = self._tasks = None

    def is_due(self, trainer: L.Trainer) -> bool:
        """After every `every_n_steps` optimizer steps, and after the run's last."""
        if not self.names:
            return False
        step = trainer.global_step
        return step > 0 and (step % self.every_n_steps == 0 or 0 < trainer.max_steps <= step)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx
    ) -> None:
        if not self.is_due(trainer) or not self._takes_part(trainer, pl_module):
            return
        summary = next((c for c in trainer.callbacks if isinstance(c, RunSummary)), None)
        with summary.not_training(pl_module) if summary is not None else nullcontext():
            started = time.perf_counter()
            scores = self.score(trainer, pl_module)
            self.seconds.append(time.perf_counter() - started)
        if trainer.global_rank != 0:
            return
        log_at_step(trainer, scores)
        if summary is not None:
            summary.add_scores(trainer, scores)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if not k.endswith("_centred"))
        log.info("lm_eval after step %d (%.1f s): %s", trainer.global_step, self.seconds[-1], shown)

    def score(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        """The tasks' scores on the model as it is now, as `eval/<task>/<metric>`."""
        from lm_eval.evaluator import evaluate

        with (
            training_untouched(pl_module.model),
            trainer.precision_plugin.forward_context(),
            quiet_lm_eval(),
        ):
            report = evaluate(
                lm=self._lm,
                task_dict=self._tasks,
                limit=self.limit,
                bootstrap_iters=0,  # standard errors are lm_eval.json's, not a run's history
                log_samples=False,
            )
        return task_metrics(report["results"], self._chance)

    @staticmethod
    def _takes_part(trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        return trainer.global_rank == 0 or getattr(pl_module, "device_mesh", None) is not None
