"""xfmr: a declarative, config-driven experiment framework for transformers.

From Python (see docs/python.md):

    import xfmr

    experiment = xfmr.compose("size=tiny", "trainer.max_steps=200")
    run = xfmr.train(experiment)
    run.history, run.generate("the cat"), xfmr.compare(run, other_run)
    xfmr.evaluate(run, tasks="NAME")  # lm-eval tasks (the eval extra)

The names below load on first use (`xfmr.api`), so `import xfmr` and the command line's
start-up stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Experiment", "Run", "compare", "compose", "evaluate", "open_run", "train"]

if TYPE_CHECKING:
    from xfmr.api import Experiment, Run, compare, compose, evaluate, open_run, train


def __getattr__(name: str) -> Any:
    if name in __all__:
        import xfmr.api

        return getattr(xfmr.api, name)
    raise AttributeError(f"module 'xfmr' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
