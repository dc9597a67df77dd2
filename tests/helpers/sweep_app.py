"""A Hydra app swept by xfmr's sweeper and launcher that trains nothing: each job prints to
stdout and stderr, logs a line, sleeps `sleep` seconds if the config has it, and writes a
results.json with its score, its pid, its parent's command line, its CUDA_VISIBLE_DEVICES and
when it started and ended (a job with x=0 raises).

    python -m helpers.sweep_app --config-dir DIR --config-name app -m x=1,2  (in tests/)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

APP_CONFIG = """\
defaults:
  - override hydra/sweeper: xfmr
  - override hydra/launcher: xfmr
  - _self_
x: 1
optimized_metric: score
hydra:
  launcher:
    preload: []
"""


@hydra.main(version_base="1.3", config_path=None, config_name=None)
def job(cfg: DictConfig) -> float:
    started = time.time()
    print(f"stdout of job x={cfg.x}", flush=True)
    print(f"stderr of job x={cfg.x}", file=sys.stderr, flush=True)
    logging.getLogger("app").info("a log record of job x=%s", cfg.x)
    if cfg.x == 0:
        raise RuntimeError("x=0 is refused")
    time.sleep(float(cfg.get("sleep") or 0))
    results = {
        "status": "completed",
        "metrics": {"score": float(cfg.x)},
        "overrides": list(HydraConfig.get().overrides.task),
        "pid": os.getpid(),
        "parent": _command(os.getppid()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "started": started,
        "ended": time.time(),
    }
    (Path(HydraConfig.get().runtime.output_dir) / "results.json").write_text(json.dumps(results))
    return float(cfg.x)


def _command(pid: int) -> str | None:
    """The command line process `pid` runs (Linux), read while it runs."""
    path = Path("/proc") / str(pid) / "cmdline"
    return path.read_bytes().replace(b"\0", b" ").decode() if path.exists() else None


if __name__ == "__main__":
    job()
