"""What `xfmr-eval` (and `xfmr.Run.evaluate`) evaluates on: the run's data section with a
person's overrides, checked as xfmr-train checks data, before torch loads."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xfmr.config import RunConfig
from xfmr.data.config import DataConfig
from xfmr.data.settings import AUTO_WORKERS
from xfmr.errors import UserError
from xfmr.nn.config import EXTENDING_POSITIONS


def data_with_overrides(run_config: RunConfig, overrides: Any) -> DataConfig:
    """The run's data section with `data.KEY=VALUE` overrides: only keys it has, and files
    that exist and hold what the objective reads (checked as xfmr-train checks them)."""
    if not isinstance(overrides, Mapping):
        raise UserError(
            f"data={overrides!r}: xfmr-eval keeps the run's data and takes overrides of its keys, "
            "e.g. data.val_source=FILE data.val_target=FILE"
        )
    data = run_config.data
    unknown = [key for key in overrides if key not in data.settings]
    if unknown:
        raise UserError(
            f"data.{unknown[0]} is not a key of this run's data ({data.target.name}); its keys: "
            f"{', '.join(data.settings)}"
        )
    changed = dict(overrides)
    if "val_batches" in data.settings and "val_batches" not in overrides:
        changed["val_batches"] = None  # the exact figure over the whole split, unless asked
    if "num_workers" not in overrides and "data.num_workers" in run_config.resolved:
        changed["num_workers"] = AUTO_WORKERS  # chosen for this device, as training chose
    merged = DataConfig.read(data.with_settings(**changed).to_dict())
    objective = run_config.objective
    merged.check_feeds(objective.name, objective.facts.reads, objective.data_choices())
    return merged


def check_length(run_config: RunConfig, data: DataConfig) -> None:
    """Windows longer than the run trained on need positions past that length, which learned
    positions have only as far as their table goes."""
    length, trained = data.get("block_size"), run_config.data.get("block_size")
    pos = run_config.model.pos
    if length is None or trained is None or length <= trained or pos.name != "learned":
        return
    table = pos.max_positions
    if table is not None and length > table:
        raise UserError(
            f"data.block_size={length} is longer than the {table} learned positions of this run "
            f"(pos=learned, trained at data.block_size={trained}): evaluate at data.block_size<="
            f"{table}; the schemes that run past their trained length are pos in "
            f"{list(EXTENDING_POSITIONS)}"
        )


def wants_by_position(asked: Any, run_config: RunConfig) -> bool:
    """`by_position`: None is on for causal LM runs and off for the others; True is refused
    where there is no position to score by."""
    if asked is not None and not isinstance(asked, bool):
        raise UserError(f"by_position={asked!r} must be true, false or null (clm runs only)")
    objective = run_config.objective.name
    if asked and objective != "clm":
        raise UserError(
            f"by_position=true scores a causal LM's loss at each position of its windows, but "
            f"this run's objective is {objective}: leave by_position unset"
        )
    return objective == "clm" and asked is not False


def outputs_path(report: Path) -> Path:
    """Where the decoded outputs go: beside the report, eval.json -> eval.outputs.txt."""
    return report.with_name(f"{report.stem}.outputs.txt")
