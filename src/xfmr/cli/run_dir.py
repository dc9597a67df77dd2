"""The run directory, judged before Hydra makes it: one that cannot be created or written is
refused in one line; one made for a run that a config mistake then refused is removed again,
so a mistake leaves no empty run directory behind (an existing one is left as it was)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from xfmr.cli.common import fail
from xfmr.errors import UserError
from xfmr.run_dir.files import make_writable_dir

# The run directory this process made, set by `RunDirectory` (one run per process).
_made: list[Path] = []


class RunDirectory(Callback):
    """`hydra.callbacks.run_dir`: checks `hydra.run.dir` before Hydra creates it, which would
    end in a traceback. Sweeps check theirs in `xfmr.sweeps.sweep`."""

    def __init__(self, prog: str = "xfmr-train") -> None:
        self.prog = prog

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        # For ${hydra:...} in the path, as Hydra itself does next.
        HydraConfig.instance().set_config(config)
        path = Path(str(config.hydra.run.dir)).absolute()
        _made.clear()
        if not path.exists():
            _made.append(path)
        try:  # Hydra swallows a callback's exceptions, not its exit
            make_writable_dir(path, key="hydra.run.dir")
        except UserError as e:
            fail(self.prog, str(e))


def discard_unused_run_dir() -> None:
    """The run directory this run made, removed if nothing trained there (no checkpoints/, no
    results.json): the run was refused before it began, and everything in the directory is
    this command's (Hydra's files, the log, the lock, a tokenizer). One that another process
    started on the same path at the same moment holds locked is left to it."""
    from xfmr.api.training import discard_unused

    for path in _made:
        discard_unused(path)
    _made.clear()
