"""xfmr from Python: compose, train, open, use and compare runs through the command line's code.

    composing.py an experiment from xfmr-train's overrides, checked as the command line checks it
    training.py  train it: one path from a composed config to a fitted run, which xfmr-train
                 takes too; logging, progress and Ctrl-C as a notebook expects
    runs.py      a run directory as an object: results, history, generate, evaluate, attention,
                 export; `evaluate(run, tasks=...)`, lm-eval tasks on it
    comparing.py runs side by side as a pandas DataFrame, as xfmr-compare tabulates them
    choices.py   which configs a group=choice argument names

Nothing here imports torch until it trains or loads a run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xfmr.api.comparing import compare
    from xfmr.api.composing import Experiment, compose
    from xfmr.api.runs import Run, evaluate, open_run
    from xfmr.api.training import train

# Each name's module, imported on first use: xfmr-train imports xfmr.api.choices and
# xfmr.api.training alone, and its start-up stays light.
_MODULES = {
    "Experiment": "composing",
    "compose": "composing",
    "Run": "runs",
    "open_run": "runs",
    "evaluate": "runs",
    "train": "training",
    "compare": "comparing",
}
__all__ = ["Experiment", "Run", "compare", "compose", "evaluate", "open_run", "train"]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = getattr(importlib.import_module(f"xfmr.api.{_MODULES[name]}"), name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'xfmr.api' has no attribute {name!r}")
