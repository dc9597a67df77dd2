"""A token cache's folder built by one process of several and published whole.

A build never writes under the cache's name: it fills a private folder (`.NAME.PID.RANDOM.tmp`
beside it) and renames it into place, one atomic step on local and network filesystems alike
(NFS, GPFS, Lustre), so a reader finds a whole cache or none, and a build killed halfway leaves
only a temporary that no reader trusts. Of several processes (DDP ranks, sweep jobs on several
hosts) that need one missing cache, the one that creates `NAME.building` (O_CREAT|O_EXCL, which
NFSv3+, GPFS and Lustre honour between hosts, unlike `flock`) builds while the others wait for
the published folder. The claim only saves work: should two builds run anyway (a claim broken
as stale from a builder that was only slow), the second rename fails and that build is
discarded.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from xfmr.files import atomic_dir

log = logging.getLogger("xfmr")

CLAIM_SUFFIX = ".building"  # beside the cache's folder while a process builds it

# A builder touches its claim every HEARTBEAT_SECONDS; a waiter that sees a claim unchanged for
# STALE_SECONDS (by its own clock: hosts' clocks differ) presumes its builder dead and builds.
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 120.0
POLL_SECONDS = 0.2

Built = TypeVar("Built")


def build_once(
    directory: Path,
    find: Callable[[], Built | None],
    build: Callable[[Path], Built],
) -> Built:
    """What `find()` finds published at `directory`: there already, or built by this process
    if it wins the claim, else waited for. `build(folder)` fills `folder` and returns what
    `find()` will find once `folder` is renamed to `directory`."""
    claim = _Claim(directory.with_name(directory.name + CLAIM_SUFFIX))
    told = False
    while (found := find()) is None:
        if claim.take():
            try:
                return find() or _publish(directory, find, build)
            finally:
                claim.release()
        if not told:
            log.info("token cache: waiting for %s to build %s", claim.holder(), directory)
            told = True
        claim.wait()
    return found


def _publish(
    directory: Path, find: Callable[[], Built | None], build: Callable[[Path], Built]
) -> Built:
    """Build into a private folder and rename it to `directory`; if another build was
    published first, this one is discarded and that one used."""
    for stale in directory.parent.glob(f".{directory.name}.*.tmp"):  # killed builds' folders
        shutil.rmtree(stale, ignore_errors=True)
    if directory.exists():  # not whole: files removed by hand, or a build of an older xfmr
        _set_aside(directory)
    try:
        with atomic_dir(directory) as folder:
            built = build(folder)
    except OSError:  # the name taken by another build (EEXIST, ENOTEMPTY), or lost to it
        found = find()
        if found is None:
            raise
        log.info(
            "token cache: %s was published by another process: this build discarded", directory
        )
        return found
    return built


def _set_aside(directory: Path) -> None:
    aside = directory.with_name(f".{directory.name}.{secrets.token_hex(4)}.tmp")
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


class _Claim:
    """`path` created exclusively by the process that builds, holding `host pid token`, and
    touched by it every HEARTBEAT_SECONDS. O_CREAT|O_EXCL is atomic between the hosts of NFSv3+,
    GPFS and Lustre (Optuna's JournalFileOpenLock relies on it too), where `flock` may be local
    to one host or refused."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mine = f"{socket.gethostname()} {os.getpid()} {secrets.token_hex(8)}"
        self.seen: tuple[str, int] | None = None  # another's claim: (text, mtime) last seen
        self.seen_since = 0.0  # when it was first seen so (time.monotonic)
        self.stop = threading.Event()

    def take(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(handle, "w") as f:
            f.write(self.mine)
        threading.Thread(target=self._beat, daemon=True).start()
        return True

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_SECONDS):
            try:
                os.utime(self.path)
            except OSError:
                pass

    def release(self) -> None:
        self.stop.set()
        if self._read()[0] == self.mine:
            self.path.unlink(missing_ok=True)

    def holder(self) -> str:
        host_pid = self._read()[0].split()[:2]
        return "process {1} on {0}".format(*host_pid) if len(host_pid) == 2 else "another process"

    def wait(self) -> None:
        """Sleep a little; break the claim if its builder is dead (a pid gone on this host) or
        has not touched it for STALE_SECONDS."""
        time.sleep(POLL_SECONDS)
        state = self._read()
        now = time.monotonic()
        if state != self.seen:
            self.seen, self.seen_since = state, now
        if state[1] and (_dead(state[0]) or now - self.seen_since > STALE_SECONDS):
            log.info(
                "token cache: %s stopped building %s: building it here", self.holder(), self.path
            )
            if self._read() == state:
                self.path.unlink(missing_ok=True)

    def _read(self) -> tuple[str, int]:
        try:
            return self.path.read_text(), self.path.stat().st_mtime_ns
        except OSError:
            return "", 0


def _dead(holder: str) -> bool:
    """Whether `holder` (`host pid token`) is a process of this host that no longer runs."""
    host, pid, _ = (holder.split() + ["", "", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process
        return False
    return False
