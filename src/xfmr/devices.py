"""Which CUDA devices this process may use, found without importing torch where there are none.

`XFMR_VISIBLE_GPUS=N` stands for N GPUs (ids 0..N-1) in `visible_gpus` alone: the seam through
which a sweep's device sharing is tested on a machine without one. Nothing else reads it, so a
job that then asks torch for a GPU still finds none.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIMULATED_GPUS = "XFMR_VISIBLE_GPUS"


def visible_gpus() -> list[str]:
    """The device ids a child process may be given in CUDA_VISIBLE_DEVICES: XFMR_VISIBLE_GPUS's
    simulated count, else CUDA_VISIBLE_DEVICES as set, else torch's count of the machine's."""
    simulated = os.environ.get(SIMULATED_GPUS)
    if simulated is not None:
        if not simulated.strip().isdigit():
            raise ValueError(f"{SIMULATED_GPUS}={simulated!r}; give a whole number >= 0")
        return [str(i) for i in range(int(simulated))]
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = [i.strip() for i in listed.split(",") if i.strip()]
        # CUDA stops at the first id that is not a device ("-1" hides them all).
        return ids[: next((n for n, i in enumerate(ids) if i.startswith("-")), len(ids))]
    if not cuda_driver_loaded():
        return []
    import torch  # only on a machine with NVIDIA's driver: how many devices does it have?

    return [str(i) for i in range(torch.cuda.device_count())]


def cuda_driver_loaded() -> bool:
    """False where NVIDIA's kernel driver is certainly absent (Linux without /proc/driver/nvidia),
    so a CPU machine need not import torch to learn it has no GPU."""
    if sys.platform != "linux":
        return True  # no cheap way to know: torch is asked
    return Path("/proc/driver/nvidia").exists()
