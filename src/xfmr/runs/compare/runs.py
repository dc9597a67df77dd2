"""Run directories under the paths a person gives, each read into a `Run`.

A directory holding `results.json` is a run (xfmr-train writes it at the end; a sweep's parent
writes a minimal one, status and reason only, for a job that crashed). Anything else is searched
one and two levels down, so a sweep directory or a directory of sweeps both work. Older runs
lack some fields: overrides then come from `.hydra/overrides.yaml`, the optimized metric from
`config.yaml`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xfmr.errors import UserError
from xfmr.run_dir.files import (
    CONFIG_FILE,
    HYDRA_DIR,
    OVERRIDES_FILE,
    RESULTS_FILE,
    SWEEP_FILE,
    describe,
)

SEARCH_DEPTH = 2
SEED = "seed"  # the config key (and override) that seeds a run's initialisation and data order
DIRECTIONS = {"minimize": "min", "maximize": "max"}
# Where in its training a history entry was taken: each kind of point (`points`) and its field.
AXES = {"step": "step", "tokens": "tokens", "flops": "flops", "time": "time_s"}


@dataclass(frozen=True)
class Run:
    """What one run left behind, as far as a comparison needs it. Missing values are None.

    Attributes:
        path: the run directory.
        status: completed, pruned, failed or interrupted.
        reason: why it failed, when it says.
        overrides: its command-line overrides, key to value (`hydra.*` left out).
        metrics: the final value of each metric.
        step: the step it stopped at.
        history: one mapping per validation, metric to value, with where it was taken (AXES:
            `step`, and `time_s`, `tokens`, `flops` in runs that recorded them).
        best: each metric at its best validation, for runs without a history.
        optimized_metric: the metric its sweep optimized, when known.
        seed: its seed, as its override or else its config gives it.
    """

    path: Path
    status: str
    reason: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float | None] = field(default_factory=dict)
    step: int | None = None
    ms_per_step: float | None = None
    n_parameters: int | None = None
    history: tuple[dict[str, float | None], ...] = ()
    best: dict[str, float | None] = field(default_factory=dict)
    optimized_metric: str | None = None
    seed: str | None = None


def find_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Every run under `paths`, each once, in the order found; a path that does not exist or
    holds no run is a UserError naming it."""
    found: dict[Path, Path] = {}
    for given in paths:
        for run_dir in run_directories(given):
            found.setdefault(run_dir.resolve(), run_dir)
    return [read_run(run_dir) for run_dir in found.values()]


def run_directories(given: str | Path) -> list[Path]:
    root = Path(given).expanduser()
    if root.name == RESULTS_FILE and root.is_file():
        root = root.parent
    if not root.exists():
        raise UserError(
            f"{given}: does not exist; give run directories (each holding {RESULTS_FILE}) "
            "or sweep directories of them"
        )
    runs = _runs_below(root, SEARCH_DEPTH) if root.is_dir() else []
    if not runs:
        raise UserError(
            f"{given}: holds no runs (no {RESULTS_FILE} in it or one or two levels down); "
            f"it holds: {describe(root) if root.is_dir() else 'a file, not a directory'}"
        )
    return runs


def _runs_below(directory: Path, depth: int) -> list[Path]:
    if (directory / RESULTS_FILE).is_file():
        return [directory]
    if depth == 0:
        return []
    children = [p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")]
    # Sweep jobs are numbered: 2 before 10.
    children.sort(
        key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name)
    )
    return [run for child in children for run in _runs_below(child, depth - 1)]


def read_run(run_dir: Path) -> Run:
    results = read_json(run_dir / RESULTS_FILE)
    overrides = results.get("overrides")
    parsed = parse_overrides(overrides if overrides is not None else hydra_overrides(run_dir))
    return Run(
        path=run_dir,
        status=str(results.get("status") or "unknown"),
        reason=results.get("reason"),
        overrides=parsed,
        metrics=numbers(results.get("metrics")),
        step=integer(results.get("step")),
        ms_per_step=number(results.get("ms_per_step")),
        n_parameters=integer(results.get("n_parameters")),
        history=tuple(numbers(entry) for entry in results.get("history") or ()),
        best=numbers(results.get("best")),
        optimized_metric=results.get("optimized_metric") or configured_metric(run_dir),
        seed=parsed[SEED] if SEED in parsed else configured_seed(run_dir),
    )


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # accepts NaN and Infinity too
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: holds {type(data).__name__}, not a JSON object")
    return data


def parse_overrides(overrides: Iterable[Any]) -> dict[str, str]:
    """`["pos=learned", "+x=1"]` as `{"pos": "learned", "x": "1"}`; Hydra's own settings
    (`hydra.*`) say where a job ran, not what it was, so they are left out."""
    parsed: dict[str, str] = {}
    for item in overrides:
        key, _, value = str(item).partition("=")
        key = key.lstrip("+~")
        if key != "hydra" and not key.startswith("hydra."):
            parsed[key] = value
    return parsed


def hydra_overrides(run_dir: Path) -> list[str]:
    listed = _read_yaml(run_dir / HYDRA_DIR / OVERRIDES_FILE)
    return listed if isinstance(listed, list) else []


def configured_metric(run_dir: Path) -> str | None:
    config = _read_yaml(run_dir / CONFIG_FILE)
    metric = config.get("optimized_metric") if isinstance(config, dict) else None
    return str(metric) if metric else None


def configured_seed(run_dir: Path) -> str | None:
    """The seed the run's resolved config gives, as an override would spell it."""
    config = _read_yaml(run_dir / CONFIG_FILE)
    seed = config.get(SEED) if isinstance(config, dict) else None
    return None if seed is None else str(seed)


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # a fallback source only: results.json is what counts


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def integer(value: Any) -> int | None:
    value = number(value)
    return int(value) if value is not None and math.isfinite(value) else None


def numbers(mapping: Any) -> dict[str, float | None]:
    return {str(k): number(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}


def metric_names(runs: Sequence[Run]) -> list[str]:
    """Every metric some run has a value of, at the end or in its history."""
    names = {k for run in runs for k in run.metrics} | {k for run in runs for k in run.best}
    names |= {k for run in runs for entry in run.history for k in entry}
    return sorted(names - set(AXES.values()))  # where a value was taken, not a metric


def optimized_metric(runs: Sequence[Run]) -> str | None:
    """The metric most of the runs were optimizing, when they say."""
    counts = Counter(run.optimized_metric for run in runs if run.optimized_metric)
    return counts.most_common(1)[0][0] if counts else None


def sweep_direction(runs: Sequence[Run], metric: str) -> str | None:
    """min or max, as the runs' sweeps (`sweep.json` beside the jobs) optimized `metric`; None
    when no sweep says, or when they disagree."""
    directions = set()
    for sweep_dir in sorted({run.path.parent for run in runs}):
        if not (sweep_dir / SWEEP_FILE).is_file():
            continue
        sweep = read_json(sweep_dir / SWEEP_FILE)
        if sweep.get("optimized_metric", metric) == metric and sweep.get("direction") in DIRECTIONS:
            directions.add(DIRECTIONS[sweep["direction"]])
    return directions.pop() if len(directions) == 1 else None
