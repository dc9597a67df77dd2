"""Files written whole or not at all: a temporary name beside the target, flushed to disk, then
renamed over it. A kill at any moment leaves the previous complete file or the new complete
file, never half of one; a failed write leaves the previous file as it was, and a full disk
is a `DiskFull` error that names the file and says so.

The temporary file sits in the target's own directory, so the rename never crosses filesystems
(a rename across them is a copy, which a kill can interrupt). What is renamed into place has the
mode `open()` and `mkdir()` give under the process's umask, whatever the writer did: safetensors
writes a file of its own (mode 0600, as `mkstemp` makes) and renames it over the path it is
given.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xfmr.errors import DiskFull

# A full disk, or the user's quota used up.
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Free space under which a failed write is taken for a full disk: a writer that does not pass
# the OSError on (torch.save's zip writer raises a RuntimeError, "file write failed") left the
# filesystem this close to full.
_NEARLY_FULL = 1 << 20


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `target` to write to; when the block ends without an
    error, the file is flushed to disk and renamed to `target`, else it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Created as open() creates a file: 0o666 less the umask, the mode the rename keeps.
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    mode = _mode(temporary)
    try:
        yield temporary
        _set_mode(temporary, mode)  # a writer that renamed its own file over it
        _fsync(temporary)
        os.replace(temporary, target)
    except BaseException as error:
        full = _disk_full(error, target.parent)
        temporary.unlink(missing_ok=True)
        if full:
            raise DiskFull(disk_full_message(target)) from None
        raise
    _fsync_dir(target.parent)


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yields a temporary folder beside `target` to fill; when the block ends without an error
    it is renamed to `target` (which must not exist), else removed: a reader never sees a
    folder half written, nor one that looks complete after a kill."""
    import shutil

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    temporary.mkdir()  # 0o777 less the umask
    folder_mode = _mode(temporary)
    try:
        yield temporary
        _settle(temporary, folder_mode)
        os.rename(temporary, target)
    except BaseException as error:
        full = _disk_full(error, target.parent)
        shutil.rmtree(temporary, ignore_errors=True)
        if full:
            raise DiskFull(disk_full_message(target)) from None
        raise
    _fsync_dir(target.parent)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _set_mode(path: Path, mode: int) -> None:
    if _mode(path) != mode:
        os.chmod(path, mode)


def _settle(folder: Path, folder_mode: int) -> None:
    """Every file under `folder` flushed to disk, and everything with the mode `mkdir()` and
    `open()` give under the umask that gave `folder` its `folder_mode`: folders that mode,
    files without its execute bits (0o755 and 0o644 under umask 0o022)."""
    for parent, folders, files in os.walk(folder):
        for name in folders:
            _set_mode(Path(parent, name), folder_mode)
        for name in files:
            _set_mode(Path(parent, name), folder_mode & 0o666)
            _fsync(Path(parent, name))


def _disk_full(error: BaseException, directory: Path) -> bool:
    """Whether a write into `directory` failed for want of space (before the partial file is
    removed): the OSError says so, or another writer's error leaves the filesystem all but
    full."""
    if isinstance(error, OSError):
        return error.errno in _DISK_FULL
    if not isinstance(error, RuntimeError):
        return False
    try:
        found = os.statvfs(directory)
    except OSError:
        return False
    return found.f_bavail * found.f_frsize < _NEARLY_FULL


def disk_full_message(target: Path) -> str:
    kept = f"the previous {target.name} is intact" if target.exists() else "nothing was written"
    return f"no space left on the device to write {target}: {kept}; free space and run again"


def atomic_write_bytes(target: str | Path, data: bytes) -> None:
    with atomic_path(target) as temporary:
        temporary.write_bytes(data)


def atomic_write_text(target: str | Path, text: str) -> None:
    atomic_write_bytes(target, text.encode("utf-8"))


def write_json(target: str | Path, value: Any) -> None:
    """Strict JSON (a float that is not a number becomes null; no bare NaN), written atomically."""
    atomic_write_text(target, json.dumps(finite(value), indent=2, allow_nan=False) + "\n")


def finite(value: Any) -> Any:
    """`value` with every NaN or infinite float replaced by None, so strict JSON can hold it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(directory: Path) -> None:
    """The rename itself reaches the disk (where the platform can open a directory)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
