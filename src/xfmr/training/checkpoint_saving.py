"""Checkpoints written whole or not at all, beside their final name.

Lightning's `TorchCheckpointIO` saves through an fsspec transaction, which on a local disk
writes the checkpoint to a file in the system's temporary directory (`tempfile.mkstemp()`) and
moves it over the target with `shutil.move`. On one filesystem that move is an atomic rename;
where the temporary directory is another filesystem (a tmpfs /tmp, a container's overlay), the
move copies into the target itself, so a kill mid-copy leaves half a checkpoint under the final
name, and a small /tmp fails saves the run directory had room for. Here the temporary file sits
in the checkpoint's own directory and is flushed before the rename (`xfmr.files.atomic_path`).

Apart from `xfmr.run_dir.checkpoints` (reading), which the entry points that only use a run
import without Lightning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint

from xfmr.files import atomic_path


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local saves are atomic; remote URLs (s3://...) keep
    Lightning's own transaction."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        with atomic_path(path) as temporary:
            torch.save(checkpoint, temporary)


class StateKeyOnce:
    """A checkpoint callback's `state_key`, formatted once.

    Lightning names a profiler section after every callback's state key for every hook it
    calls, even with no profiler; a checkpoint callback's key is the repr of its settings, so
    the two of a run cost about a tenth of a millisecond a step on a CPU. The settings do not
    change after `__init__`, nor does the key, which names the callback's state in checkpoints.
    """

    @property
    def state_key(self) -> str:
        key = self.__dict__.get("_state_key_once")
        if key is None:
            key = self.__dict__["_state_key_once"] = super().state_key  # type: ignore[misc]
        return key


class ModelCheckpoint(StateKeyOnce, LightningModelCheckpoint):
    """Lightning's ModelCheckpoint with its state key formatted once. Named as Lightning's, so
    the key (the class's name and settings) under which checkpoints hold its state is too."""
