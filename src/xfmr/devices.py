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


DEVICES_VALID = "an integer >= 1, -1 (every device), auto, or a list of device indices"


def device_count(devices: object) -> int | None:
    """How many devices `trainer.devices` names; None for auto and -1 (every device). A value
    that names none is a ValueError saying what would."""
    if isinstance(devices, list | tuple):
        count: object = len(devices)
    elif isinstance(devices, str) and devices != "auto":
        parts = [p for p in devices.split(",") if p.strip()]
        if not parts or not all(p.strip().lstrip("-").isdigit() for p in parts):
            raise ValueError(f"trainer.devices={devices!r} is not valid: use {DEVICES_VALID}")
        count = len(parts) if "," in devices else int(devices)
    else:
        count = devices
    if devices == "auto" or count == -1:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"trainer.devices={devices!r} is not valid: use {DEVICES_VALID}")
    return count


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity: a job scheduler's share)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# What torch says of the machine's GPUs, asked only where NVIDIA's driver is loaded: on a
# machine without one, the config is checked without importing torch.


def cuda_available() -> bool:
    if not cuda_driver_loaded():
        return False
    import torch

    return torch.cuda.is_available()


def cuda_device_count() -> int:
    if not cuda_driver_loaded():
        return 0
    import torch

    return torch.cuda.device_count()


def cuda_bf16() -> bool:
    """Whether the GPU has bfloat16 (Ampere and later)."""
    import torch

    return torch.cuda.is_bf16_supported()


def cuda_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def accelerator_found() -> bool:
    """Whether Lightning's `accelerator=auto` finds a GPU (CUDA, or Apple's MPS)."""
    if cuda_available():
        return True
    if sys.platform != "darwin":
        return False
    import torch

    return torch.backends.mps.is_available()
