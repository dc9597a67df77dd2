"""Files a run and its exports write have the mode any file the user writes has: `open()`'s
0o666 and `mkdir()`'s 0o777 less the umask, however the library that wrote them made them
(safetensors writes a file of its own, mode 0600, and renames it into place)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from helpers.runs import TinyRun
from xfmr.api import Run
from xfmr.files import atomic_dir, atomic_path, write_json
from xfmr.training.checkpoint_saving import AtomicCheckpointIO

pytestmark = pytest.mark.usefixtures("one_thread")

# umask -> (a file's mode, a folder's mode)
MODES = {0o022: (0o644, 0o755), 0o077: (0o600, 0o700)}
each_umask = pytest.mark.parametrize("mask", MODES, ids=lambda mask: f"umask={mask:04o}")


@contextmanager
def umask(mask: int) -> Iterator[None]:
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


def _modes(top: Path) -> dict[str, str]:
    """Every path under `top`: its permission bits."""
    return {p.relative_to(top).as_posix(): oct(p.stat().st_mode & 0o777) for p in top.rglob("*")}


def _expected(top: Path, file_mode: int, folder_mode: int) -> dict[str, str]:
    """Every path under `top`: the mode `open()` or `mkdir()` would have given it."""
    return {
        p.relative_to(top).as_posix(): oct(folder_mode if p.is_dir() else file_mode)
        for p in top.rglob("*")
    }


def _owner_only_rename(temporary: Path) -> None:
    """Write as safetensors does: a file of mode 0600 renamed over the path given."""
    own = temporary.with_name(temporary.name + ".own")
    os.close(os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    os.replace(own, temporary)


@each_umask
def test_atomic_writes_take_the_umask_mode_whatever_the_writer_did(tmp_path, mask) -> None:
    with umask(mask):
        with atomic_path(tmp_path / "file.bin") as temporary:
            _owner_only_rename(temporary)
        with atomic_dir(tmp_path / "folder") as folder:
            (folder / "inner").mkdir(mode=0o700)
            _owner_only_rename(folder / "inner" / "weights.bin")
            _owner_only_rename(folder / "config.json")
    assert _modes(tmp_path) == _expected(tmp_path, *MODES[mask])


@each_umask
def test_a_safetensors_export_takes_the_umask_mode(tiny_run: TinyRun, tmp_path, mask) -> None:
    share = tmp_path / "share"
    with umask(mask):
        Run(tiny_run.dir).exported(share / "model.safetensors")
    assert sorted(p.name for p in share.iterdir()) == ["model.safetensors", "tokenizer.json"]
    assert _modes(tmp_path) == _expected(tmp_path, *MODES[mask])


@each_umask
def test_a_hugging_face_export_takes_the_umask_mode(tiny_run: TinyRun, tmp_path, mask) -> None:
    with umask(mask):
        result = Run(tiny_run.dir).exported(tmp_path / "hf", format="hf")
    assert "model.safetensors" in result["files"]
    assert _modes(tmp_path) == _expected(tmp_path, *MODES[mask])


@each_umask
def test_checkpoints_and_results_take_the_umask_mode(tmp_path, mask) -> None:
    with umask(mask):
        AtomicCheckpointIO().save_checkpoint({"w": torch.ones(2)}, tmp_path / "ckpt" / "last.ckpt")
        write_json(tmp_path / "results.json", {"step": 4})
    assert _modes(tmp_path) == _expected(tmp_path, *MODES[mask])


def test_a_runs_files_have_the_umask_mode(tiny_run: TinyRun) -> None:
    """The shared run was trained under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    assert "checkpoints/best.ckpt" in _modes(tiny_run.dir)
    assert _modes(tiny_run.dir) == _expected(tiny_run.dir, 0o666 & ~mask, 0o777 & ~mask)
