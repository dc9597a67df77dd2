"""Start the other DDP processes of one run without re-running the Hydra app.

Lightning's DDP re-executes `sys.argv` in each child process. Under Hydra that re-runs the Hydra
app: children make their own run directories, and under `-m` each child starts a whole sweep of
its own. Here the Hydra job (rank 0) writes the fully resolved config into its run directory and
starts ranks 1..N-1 as `python -m xfmr.training.worker CONFIG` with the torch.distributed
environment set. Lightning sees LOCAL_RANK and treats the processes as launched externally, as
under torchrun. One run directory per job, however many processes it uses.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from xfmr.config.trainer import SHARDED_STRATEGY

_DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK")


def processes_to_launch(trainer_cfg: dict[str, Any]) -> int:
    """How many processes this run needs us to start (1 = none beyond this one).

    Only single-node DDP or FSDP (`launched_locally`) on processes nobody else launched: under
    torchrun, SLURM or inside a worker, the environment already names the rank and Lightning
    takes it from there.
    """
    if not launched_locally(trainer_cfg.get("strategy")):
        return 1
    if any(v in os.environ for v in ("LOCAL_RANK", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID")):
        return 1
    if int(trainer_cfg.get("num_nodes") or 1) != 1:
        return 1
    devices = trainer_cfg.get("devices", "auto")
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if isinstance(devices, int) and devices > 0:
        return devices
    accelerator = str(trainer_cfg.get("accelerator") or "auto")
    if accelerator in ("gpu", "cuda", "auto"):
        import torch

        return max(1, torch.cuda.device_count())
    return 1


def launched_locally(strategy: Any) -> bool:
    """Whether xfmr starts the processes of `strategy` (a name, or a `_target_` mapping): DDP's
    by name (not its spawn or notebook variants, which start their own) and trainer=fsdp's,
    whose processes Lightning would likewise start by running sys.argv again."""
    if isinstance(strategy, dict):
        return strategy.get("_target_") == SHARDED_STRATEGY
    name = str(strategy or "auto")
    return name.startswith("ddp") and not name.startswith(("ddp_spawn", "ddp_notebook"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalDDPLauncher:
    """Context manager: on enter, this process becomes rank 0 and ranks 1..N-1 start; on exit,
    it waits for them, tears down the process group and restores the environment, so the next
    job of a multirun starts clean. If a worker dies, the others are stopped and this process
    is interrupted rather than left waiting in a collective."""

    def __init__(self, nprocs: int, config_path: Path, log_dir: Path) -> None:
        self.nprocs = nprocs
        self.config_path = config_path
        self.log_dir = log_dir
        self.children: list[subprocess.Popen] = []
        self._saved_env: dict[str, str | None] = {}
        self._done = threading.Event()
        self.failed: str | None = None

    def __enter__(self) -> LocalDDPLauncher:
        env = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
            "NODE_RANK": "0",
            "WORLD_SIZE": str(self.nprocs),
        }
        self._saved_env = {k: os.environ.get(k) for k in _DIST_ENV}
        os.environ.update(env, LOCAL_RANK="0", RANK="0")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for rank in range(1, self.nprocs):
            log = open(self.log_dir / f"rank{rank}.log", "w")
            child_env = {**os.environ, **env, "LOCAL_RANK": str(rank), "RANK": str(rank)}
            cmd = [sys.executable, "-m", "xfmr.training.worker", str(self.config_path)]
            self.children.append(
                subprocess.Popen(cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT)
            )
            log.close()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(1.0):
            for rank, child in enumerate(self.children, start=1):
                code = child.poll()
                if code not in (None, 0):
                    self.failed = f"DDP rank {rank} exited with code {code}; see {self.log_dir / f'rank{rank}.log'}"
                    self._stop_children()
                    os.kill(os.getpid(), signal.SIGINT)
                    return

    def _stop_children(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.terminate()

    def __exit__(self, exc_type, exc, tb) -> None:
        deadline = time.monotonic() + (60 if exc_type is None else 5)
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self._done.set()
        codes = [c.returncode for c in self.children]
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if exc_type is None and any(codes):
            raise RuntimeError(f"DDP workers exited with codes {codes}; logs in {self.log_dir}")
