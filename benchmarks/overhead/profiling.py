"""step_overhead.py --profile's tables, read from the cProfile stats of the default row's timed
steps (`StepTimes` runs cProfile in xfmr-train's process): microseconds per step in chosen parts
of a step, each the cumulative time of its functions entered from outside them (the parts nest
and do not add up); the self time of every function summed by package (which adds up); the
functions with the most self time.
"""

from __future__ import annotations

import os
import pstats
from pathlib import Path
from typing import Any

Key = tuple[str, int, str]  # cProfile's: (file, first line, function)


def print_profile(
    row_name: str, stats_file: Path, record: dict[str, Any], unprofiled_ms: float
) -> None:
    """Where the profiled run's time went: `stats_file` its cProfile stats, `record` what its
    `StepTimes` wrote, `unprofiled_ms` the row's mean ms/step in the table."""
    stats = pstats.Stats(str(stats_file)).stats
    steps = record["profiled_steps"]
    total = sum(entry[2] for entry in stats.values())
    print(f"\n## cProfile: {row_name}\n\n{steps} steps, {1e6 * total / steps:.0f} µs/step "
          f"under cProfile ({1000 * unprofiled_ms:.0f} µs/step without, the table's mean)\n")  # fmt: skip
    print("Parts of a step, each with what it calls (they nest and do not add up):\n")
    print("| part | µs/step | share of the profiled step |\n|---|---:|---:|")
    for part, inside in step_parts(record["hooks"]):
        seconds = entered_time(stats, inside)
        print(f"| {part} | {1e6 * seconds / steps:.0f} | {seconds / total:.1%} |")
    print("\nSelf time by package (adds up to the profiled step):\n")
    print("| package | µs/step | share |\n|---|---:|---:|")
    by_package: dict[str, float] = {}
    for key, entry in stats.items():
        by_package[package(key)] = by_package.get(package(key), 0.0) + entry[2]
    for name, seconds in sorted(by_package.items(), key=lambda item: -item[1]):
        print(f"| {name} | {1e6 * seconds / steps:.0f} | {seconds / total:.1%} |")
    print_top_functions(stats, steps)


def entered_time(stats: dict[Key, tuple], inside) -> float:
    """Cumulative seconds in the functions `inside` selects, counted where they are called from
    a function it does not select (or from nothing cProfile saw), so nesting counts once."""
    seconds = 0.0
    for key, (_, _, _, cumulative, callers) in stats.items():
        if not inside(key):
            continue
        if not callers:
            seconds += cumulative
            continue
        seconds += sum(entry[3] for caller, entry in callers.items() if not inside(caller))
    return seconds


def _in(path: str, function: str | None = None):
    """Selects the functions (all, or those named `function`) of files whose path has `path`."""
    path = path.replace("/", os.sep)
    return lambda key: path in key[0] and (function is None or key[2] == function)


def step_parts(hooks: dict[str, list[list[Any]]]) -> list[tuple[str, Any]]:
    """The parts of a step --profile reports: (name, which cProfile keys belong to it)."""
    parts = [
        ("the whole step (Lightning's training_epoch_loop.advance)",
         _in("loops/training_epoch_loop.py", "advance")),
        ("batch (Lightning's fetcher, DataLoader, collate)", _in("lightning/pytorch/loops/fetchers")),
        ("torch.manual_seed (it captures the stack for lazy CUDA, MTIA and XPU seeding)",
         _in("torch/random.py", "manual_seed")),
        ("training_step (xfmr's module)", _in("xfmr/training/module.py", "training_step")),
        ("forward + loss (the objective's forward)", _in("xfmr/objectives/", "forward")),
        ("LightningModule.log", _in("lightning/pytorch/core/module.py", "log")),
        ("backward (Tensor.backward)", _in("torch/_tensor.py", "backward")),
        ("non-finite guard (xfmr.training.guards)", _in("xfmr/training/guards.py")),
        ("optimizer.step, Lightning's wrappers (clipping, hooks inside)",
         _in("lightning/pytorch/core/optimizer.py", "step")),
        ("gradient clipping (clip_grad_norm_)", _in("torch/nn/utils/clip_grad.py")),
        ("AdamW's fused kernel", lambda key: "_fused_adamw" in key[2]),
        ("zero_grad", _in("torch/optim/optimizer.py", "zero_grad")),
        ("lr schedule (LambdaLR.step)", _in("torch/optim/lr_scheduler.py", "step")),
        ("logger connector (results, logger writes)", _in("connectors/logger_connector/")),
        ("logger writes (the loggers' log_metrics)", _in("/loggers/", "log_metrics")),
    ]  # fmt: skip
    classes: dict[frozenset, list[str]] = {}  # classes that share their hooks' code share a row
    for name, code in hooks.items():
        if name != "StepTimes" and code:
            classes.setdefault(frozenset(map(tuple, code)), []).append(name)
    for code, names in classes.items():
        parts.append((f"callback {', '.join(names)}", lambda key, code=code: key in code))
    own = frozenset(map(tuple, hooks.get("StepTimes", [])))
    parts.append(("callback StepTimes (this benchmark's timer)", lambda key: key in own))
    return parts


def package(key: Key) -> str:
    path = key[0].replace(os.sep, "/")
    if path == "~":
        return "C functions (torch's ops and autograd; Python's builtins)"
    for marker, name in (("/lightning/", "lightning"), ("/lightning_utilities/", "lightning"),
                         ("/torchmetrics/", "torchmetrics"), ("/torch/", "torch (Python)"),
                         ("/xfmr/", "xfmr"), ("/rich/", "rich"),
                         ("/overhead/step_times.py", "StepTimes")):  # fmt: skip
        if marker in path:
            return name
    return "Python's library and others"


def print_top_functions(stats: dict[Key, tuple], steps: int, count: int = 15) -> None:
    print(f"\nThe {count} functions with the most self time:\n")
    print("| function | µs/step self | µs/step with callees | calls/step |\n|---|---:|---:|---:|")
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:count]
    for (path, line, function), (_, calls, self_s, cumulative, _) in top:
        where = function if path == "~" else f"{function} ({shorten(path)}:{line})"
        print(f"| {where} | {1e6 * self_s / steps:.0f} | {1e6 * cumulative / steps:.0f} | "
              f"{calls / steps:.1f} |")  # fmt: skip


def shorten(path: str) -> str:
    parts = Path(path).parts
    for anchor in ("site-packages", "src"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) + 1 :])
    return Path(path).name
