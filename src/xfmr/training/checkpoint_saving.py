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
