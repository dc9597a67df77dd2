"""xfmr from Python: compose, train, open, use and compare runs through the command line's code.

    compose.py   an experiment from xfmr-train's overrides, checked as the command line checks it
    training.py  train it: one path from a composed config to a fitted run, which xfmr-train
                 takes too; logging, progress and Ctrl-C as a notebook expects
    runs.py      a run directory as an object: results, history, generate, evaluate, attention,
                 export
    compare.py   runs side by side as a pandas DataFrame, as xfmr-compare tabulates them
    choices.py   which configs a group=choice argument names

Nothing here imports torch until it trains or loads a run.
"""

from xfmr.api.compare import compare
from xfmr.api.compose import Experiment, compose
from xfmr.api.runs import Run, open_run
from xfmr.api.training import train

__all__ = ["Experiment", "Run", "compare", "compose", "open_run", "train"]
