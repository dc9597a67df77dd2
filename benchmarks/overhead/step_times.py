"""step_overhead.py's timer: the callback that xfmr-train loads in its own process
(`+callbacks.step_times._target_=overhead.step_times.StepTimes`, benchmarks/ on its PYTHONPATH)
and that Lightning's loop alone adds to its Trainer. The plain loops without Lightning never
import this module, so they never import Lightning.
"""

from __future__ import annotations

import cProfile
import inspect
import json
import time
from pathlib import Path

import lightning as L
import torch

from overhead.plain_loops import PairedPlainLoop


class StepTimes(L.Callback):
    """Records `time.perf_counter()` at the end of every training step and writes the list,
    the torch threads and the callbacks to `path` when training ends. With `profile`, runs
    cProfile from the end of step `profile_from` to the end of the last step and writes
    its stats there, and the code of every callback's hooks beside them.

    With `nanogpt` and `data`, each step is followed by one step of the plain loop over
    nanoGPT's model (`PairedPlainLoop`), in this process and timed apart: its time is
    taken out of xfmr's interval and recorded, so the two are measured at the same
    moments on the same core.

    Each step's interval is also split where Lightning's hooks fall: from the last step's end
    to `on_train_batch_start` (the loop's bookkeeping, the fetcher, the DataLoader and
    collate), the module's `training_step` itself (timed around the call), and the rest
    (the strategy's call and the hooks around the step)."""

    def __init__(
        self,
        path: str,
        profile: str | None = None,
        profile_from: int = 1,
        nanogpt: str | None = None,
        data: str | None = None,
    ) -> None:
        self.path, self.profile, self.profile_from = Path(path), profile, profile_from
        self.times: list[float] = []
        self.paired: list[float] = []  # the plain step's seconds after each xfmr step
        self.paired_total = 0.0
        self.plain = (nanogpt, data) if nanogpt and data and not profile else None
        self.profiler: cProfile.Profile | None = None
        self.starts: list[float] = []  # on the same clock as `times`
        self.in_step: list[float] = []  # seconds inside the module's training_step

    def on_train_start(self, trainer, pl_module) -> None:
        if self.plain is not None:
            self.plain = PairedPlainLoop(Path(self.plain[0]), Path(self.plain[1]),
                                         steps=trainer.max_steps)  # fmt: skip
        step = pl_module.training_step  # timed on the instance: Lightning calls it there

        def timed_step(*args, **kwargs):
            started = time.perf_counter()
            try:
                return step(*args, **kwargs)
            finally:
                self.in_step.append(time.perf_counter() - started)

        pl_module.training_step = timed_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter() - self.paired_total)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # A clock that stops while the paired plain steps run: its intervals are xfmr's.
        self.times.append(time.perf_counter() - self.paired_total)
        if isinstance(self.plain, PairedPlainLoop):
            self.paired.append(self.plain.step())
            self.paired_total += self.paired[-1]
        if self.profile and len(self.times) == self.profile_from:
            self.profiler = cProfile.Profile()
            self.profiler.enable()
        elif self.profiler is not None and len(self.times) == trainer.max_steps:
            self.profiler.disable()
            self.profiler.dump_stats(self.profile)

    def on_train_end(self, trainer, pl_module) -> None:
        record = {
            "times": self.times,
            "paired": self.paired,
            "starts": self.starts,
            "in_step": self.in_step,
            "threads": torch.get_num_threads(),
            "callbacks": [type(c).__name__ for c in trainer.callbacks],
            "data_workers": getattr(trainer.train_dataloader, "num_workers", None),
        }
        if self.profile:
            record["hooks"] = {type(c).__name__: hook_code(c) for c in trainer.callbacks}
            record["profiled_steps"] = len(self.times) - self.profile_from
        self.path.write_text(json.dumps(record))


def hook_code(callback: L.Callback) -> list[tuple[str, int, str]]:
    """Where each hook the callback's class overrides is defined: cProfile's keys."""
    found = []
    for name in dir(L.Callback):
        if not name.startswith("on_"):
            continue
        method = getattr(type(callback), name)
        if method is getattr(L.Callback, name):
            continue
        code = inspect.unwrap(method).__code__
        found.append((code.co_filename, code.co_firstlineno, code.co_name))
    return found
