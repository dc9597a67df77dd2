"""One training process per run directory.

`xfmr-train` holds an exclusive POSIX lock (`lockf`) on RUN_DIR/.lock while it trains there,
and writes its pid and host into the file for the message a second process gets. The operating
system drops the lock when the holder exits in any way, SIGKILL included, so a stale file never
blocks a later run. A POSIX lock belongs to the process, not to the open file: the DataLoader
workers a run forks do not hold it, so a restart right after a kill -9 is not refused while
they wind down (an `flock` would be shared with them). The file stays in place: removing it would let two processes lock two different
files of the same name.

`xfmr-train` and `xfmr.train` take the lock once (`xfmr.api.training.fit`), before
torch loads, so a second process is refused in a second or two.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xfmr.errors import UserError
from xfmr.run_dir.files import LOCK_FILE

# The environment that names this process's global rank: torchrun and xfmr's own DDP launcher
# (RANK), SLURM (SLURM_PROCID), a single node's launchers (LOCAL_RANK).
_RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK")
# Run directories this process holds, and how many blocks hold each.
_held: dict[Path, int] = {}


@contextmanager
def hold_run_dir(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock for the block; a directory another live process holds is a
    UserError naming it and the holder's pid."""
    key = run_dir.resolve()
    # This process holds it already: a second descriptor would be granted the lock, and
    # closing it would release the first's (POSIX locks are per process).
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    handle = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = os.pread(handle, 256, 0).decode(errors="replace").strip()
            raise UserError(
                f"run directory {run_dir} is in use: another training process "
                f"({holder or 'pid not yet written'}) holds {run_dir / LOCK_FILE}; wait for it "
                "to end, stop it, or train in another directory (hydra.run.dir=DIR)"
            ) from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
    finally:
        os.close(handle)  # releases the lock


def global_rank() -> int:
    """This process's rank in a distributed run, as the environment names it (0 outside one)."""
    for name in _RANK_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def is_global_rank_zero() -> bool:
    """True unless the environment says this is another rank of a distributed run."""
    return global_rank() == 0
