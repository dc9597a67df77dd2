"""A sweep's GPUs divided between the jobs that run at once: each job is given its group in
CUDA_VISIBLE_DEVICES as it starts and gives it back as it ends, so two running jobs never hold
the same GPU unless the person asked them to share (`hydra.launcher.share_gpus=true`).

Decided in the sweep's process, before any job starts: with G visible GPUs and W workers each
job sees G // W of them (one each with W == G); a request that cannot be met is refused first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from xfmr.devices import device_count, visible_gpus
from xfmr.errors import UserError

GPU_ACCELERATORS = ("auto", "gpu", "cuda")


@dataclass(frozen=True)
class GpuGroups:
    """The device groups jobs take: `shared`, a group may be held by several jobs at once."""

    groups: tuple[tuple[str, ...], ...]
    shared: bool = False


def describe_groups(groups: GpuGroups) -> str:
    """The GPUs each job is given, in words that read as devices, not counts: "each job trains
    on GPU 0", "up to 2 jobs at once, each on GPUs of its own: GPUs 0,1 | GPUs 2,3"."""
    names = [f"GPU{'s' if len(group) > 1 else ''} {','.join(group)}" for group in groups.groups]
    if groups.shared:
        return f"jobs share the GPUs, several at once on each of: {' | '.join(names)}"
    if len(names) == 1:
        return f"each job trains on {names[0]}"
    return f"up to {len(names)} jobs at once, each on GPUs of its own: {' | '.join(names)}"


def divide_gpus(
    visible: list[str], workers: int, devices: Any, *, share: bool = False
) -> GpuGroups | None:
    """The groups `workers` jobs at a time take from the `visible` GPUs, each job running on
    `devices` (`trainer.devices`: a count, a list, auto or -1, every device of its group).
    None without GPUs: nothing changes."""
    gpus = len(visible)
    if not gpus:
        return None
    try:
        per_job = device_count(devices)  # None: auto or -1, the whole group
    except ValueError as e:
        raise UserError(str(e)) from None
    if per_job is not None and per_job > gpus:
        raise UserError(
            f"trainer.devices={devices} asks for {per_job} GPUs per job, but {gpus} are "
            f"visible: use trainer.devices<={gpus}"
        )
    if share:
        size = per_job or gpus
        return GpuGroups(_blocks(visible, size, gpus // size), shared=True)
    if workers > gpus:
        raise UserError(
            f"hydra.sweeper.workers={workers} runs {workers} jobs at once on {gpus} GPU(s), "
            f"one job per GPU at most: use hydra.sweeper.workers<={gpus}, or let jobs share "
            "GPUs with hydra.launcher.share_gpus=true"
        )
    size = gpus // workers
    if per_job is not None and per_job > size:
        raise UserError(
            f"trainer.devices={devices} x hydra.sweeper.workers={workers} needs "
            f"{per_job * workers} GPUs, but {gpus} are visible: use trainer.devices<={size} "
            f"or hydra.sweeper.workers<={gpus // per_job} (or share: hydra.launcher.share_gpus=true)"
        )
    return GpuGroups(_blocks(visible, size, workers))


def _blocks(visible: list[str], size: int, count: int) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(visible[n * size : (n + 1) * size]) for n in range(count))


def sweep_gpus(config: Any, workers: int, *, share: bool) -> GpuGroups | None:
    """The sweep config's GPU groups; None where its jobs do not train on GPUs (no `trainer`
    section, `trainer.accelerator=cpu`, or no GPU visible: the job's own check refuses a GPU
    it asks for and cannot have)."""
    trainer = OmegaConf.select(config, "trainer")
    if trainer is None:
        return None
    accelerator = str(trainer.get("accelerator") or "auto")
    if accelerator not in GPU_ACCELERATORS:
        return None
    try:
        visible = visible_gpus()
    except ValueError as e:  # a simulated count that is not a number
        raise UserError(str(e)) from None
    return divide_gpus(visible, workers, trainer.get("devices", "auto"), share=share)


class GpuPool:
    """The groups, taken by jobs as they start and given back as they end: a free group, or
    where groups are shared the one fewest jobs hold (the lowest of equals)."""

    def __init__(self, groups: GpuGroups) -> None:
        self.groups = groups
        self._held = [0] * len(groups.groups)
        self._lock = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[tuple[str, ...]]:
        with self._lock:
            index = min(range(len(self._held)), key=lambda n: (self._held[n], n))
            # No more jobs run at once than there are groups (divide_gpus), unless shared.
            assert self.groups.shared or self._held[index] == 0, "no free GPU group"
            self._held[index] += 1
        try:
            yield self.groups.groups[index]
        finally:
            with self._lock:
                self._held[index] -= 1
