"""Checkpoint averaging (Vaswani et al. 2017, sec. 6.1: the base models average the last 5
checkpoints, written at 10-minute intervals): every parameter of the newest N periodic
checkpoints, averaged element-wise into one checkpoint that loads like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from xfmr.errors import UserError
from xfmr.files import atomic_path
from xfmr.run_dir.checkpoints import read_checkpoint
from xfmr.run_dir.files import (
    AVERAGED_CHECKPOINT,
    CHECKPOINT_DIR,
    periodic_checkpoints,
    run_directory,
)
from xfmr.runs.export import tied_names


def average_checkpoints(
    run_dir: str | Path, *, last: int, out: str | Path | None = None
) -> dict[str, Any]:
    """Average the newest `last` periodic checkpoints of `run_dir` (newest by the global step
    stored inside, not by name) into `out` (default: checkpoints/averaged.ckpt).

    The result keeps the newest checkpoint's hyper-parameters and loop state, has no optimizer
    or scheduler state (a run resumed from it starts both afresh), and lists what was averaged
    under `averaged_from`. Returns that list, the output path and the newest step.
    """
    root = run_directory(run_dir)
    newest = newest_periodic(root, last)
    states = [read_checkpoint(path, mmap=True) for path, _ in newest]
    check_same_model(states, [path for path, _ in newest])
    averaged = {**states[0]}  # the newest: its hyper-parameters, loops and callbacks
    averaged["state_dict"] = average_state_dicts([s["state_dict"] for s in states])
    averaged["optimizer_states"] = []  # Lightning restores none and starts a fresh optimizer
    averaged["lr_schedulers"] = []
    averaged["averaged_from"] = [{"file": p.name, "global_step": step} for p, step in newest]
    target = Path(out) if out else root / CHECKPOINT_DIR / AVERAGED_CHECKPOINT
    with atomic_path(target) as temporary:  # a reader never sees half a checkpoint
        torch.save(averaged, temporary)
    return {
        "out": str(target),
        "global_step": newest[0][1],
        "averaged_from": averaged["averaged_from"],
    }


def newest_periodic(root: Path, last: int) -> list[tuple[Path, int]]:
    """The `last` periodic checkpoints with the highest stored global step, newest first."""
    if not isinstance(last, int) or last < 1:
        raise UserError(f"last={last!r} must be a positive integer (how many to average)")
    found = periodic_checkpoints(root, at_least=last)
    steps = [(path, _stored_step(path)) for path in found]
    return sorted(steps, key=lambda item: item[1], reverse=True)[:last]


def _stored_step(path: Path) -> int:
    step = read_checkpoint(path, mmap=True).get("global_step")
    if not isinstance(step, int):
        raise UserError(f"checkpoint {str(path)!r} records no global_step: it cannot be ordered")
    return step


def check_same_model(states: list[dict[str, Any]], paths: list[Path]) -> None:
    """Checkpoints of one model: the same model config, tensor names and shapes."""
    reference = states[0]
    shapes = {k: tuple(v.shape) for k, v in reference["state_dict"].items()}
    for state, path in zip(states[1:], paths[1:], strict=True):
        if (
            state["hyper_parameters"]["model_config"]
            != reference["hyper_parameters"]["model_config"]
        ):
            raise UserError(
                f"checkpoint {str(path)!r} was trained with another model config than "
                f"{str(paths[0])!r}: only checkpoints of one run can be averaged"
            )
        other = {k: tuple(v.shape) for k, v in state["state_dict"].items()}
        if other != shapes:
            differs = sorted(set(other.items()) ^ set(shapes.items()))[:3]
            raise UserError(
                f"checkpoint {str(path)!r} holds other tensors than {str(paths[0])!r} "
                f"(e.g. {differs}): only checkpoints of one model can be averaged"
            )


def average_state_dicts(state_dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (summed in float64, cast back); other
    tensors (integer buffers) are taken from the first. Tensors that share storage in the
    first (tied embeddings) share it in the result too."""
    averaged: dict[str, torch.Tensor] = {}
    tied = tied_names(state_dicts[0])
    for name, first in state_dicts[0].items():
        if name in tied:
            averaged[name] = averaged[tied[name]]
            continue
        if first.is_floating_point():
            total = torch.zeros(first.shape, dtype=torch.float64)
            for state in state_dicts:
                total += state[name].to(torch.float64)
            value = (total / len(state_dicts)).to(first.dtype)
        else:
            value = first.clone()
        averaged[name] = value
    return averaged
