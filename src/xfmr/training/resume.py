"""The checkpoint a run resumes: the one `ckpt_path` names, else its run directory's newest, read
safely and compared with the model the run builds before anything trains."""

from __future__ import annotations

from pathlib import Path

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.nn.model_keys import differences, resume_keys
from xfmr.parts.sources import check_ckpt_path
from xfmr.run_dir.checkpoints import read_checkpoint
from xfmr.run_dir.files import (
    CHECKPOINT_DIR,
    LAST_CHECKPOINT,
    PERIODIC_GLOB,
    SHARDED_STATE_FILE,
    is_checkpoint,
)


def resolve_checkpoint(
    ckpt_path: str | None, run_dir: Path, model_config: ModelConfig
) -> str | None:
    """`ckpt_path` if given, else the newest of the run directory's `last.ckpt` and periodic
    `step-*.ckpt`, if any; checked before any training so a wrong file fails fast and nothing
    already saved is touched."""
    if not ckpt_path:
        newest = newest_checkpoint(run_dir / CHECKPOINT_DIR)
        if newest is None:
            return None
        ckpt_path = str(newest)
    check_ckpt_path(ckpt_path)  # again: the file may have gone since the config was read
    path = Path(ckpt_path)
    saved = read_checkpoint(path, key="ckpt_path", mmap=True)["hyper_parameters"]["model_config"]
    differs = differences(ModelConfig.from_dict(saved), model_config, ignore=resume_keys())
    if differs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(f"ckpt_path={ckpt_path!r} was trained with a different model ({detail})")
    return str(path)


def newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint a run resumes from: the last written of `last.ckpt` and `step-*.ckpt`
    (every one is written whole, then renamed into place; a sharded one is a folder, whose
    time is its state file's)."""
    candidates = (directory / LAST_CHECKPOINT, *directory.glob(PERIODIC_GLOB))
    found = [p / SHARDED_STATE_FILE if p.is_dir() else p for p in candidates if is_checkpoint(p)]
    newest = max(found, key=lambda p: p.stat().st_mtime_ns, default=None)
    return newest.parent if newest is not None and newest.name == SHARDED_STATE_FILE else newest
