"""What `xfmr-eval` (and `xfmr.Run.evaluate`) evaluates on: the run's data section with a
person's overrides, checked as xfmr-train checks data, before torch loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xfmr.checks import check_data, model_section
from xfmr.errors import UserError
from xfmr.nn.config import EXTENDING_POSITIONS
from xfmr.objectives.registry import objective_facts


def data_with_overrides(run_config: DictConfig, overrides: Any) -> DictConfig:
    """The run's data section with `data.KEY=VALUE` overrides: only keys it has, and files
    that exist (checked as xfmr-train checks them)."""
    if not isinstance(overrides, DictConfig):
        raise UserError(
            f"data={overrides!r}: xfmr-eval keeps the run's data and takes overrides of its keys, "
            "e.g. data.val_source=FILE data.val_target=FILE"
        )
    data = run_config.data
    unknown = [key for key in overrides if key not in data]
    if unknown:
        target = str(data.get("_target_", "")).rsplit(".", 1)[-1]
        raise UserError(
            f"data.{unknown[0]} is not a key of this run's data ({target}); its keys: "
            f"{', '.join(k for k in data if k != '_target_')}"
        )
    merged = OmegaConf.merge(data, overrides)
    if "val_batches" in merged and "val_batches" not in overrides:
        merged.val_batches = None  # the exact figure over the whole split, unless asked
    checked = OmegaConf.merge(run_config, {"data": merged})
    check_data(checked)
    return merged


def check_length(run_config: DictConfig, data_config: DictConfig) -> None:
    """Windows longer than the run trained on need positions past that length, which learned
    positions have only as far as their table goes."""
    length, trained = data_config.get("block_size"), run_config.data.get("block_size")
    pos = model_section(run_config)["pos"]
    if length is None or trained is None or length <= trained or pos.get("name") != "learned":
        return
    table = pos.get("max_positions")
    if table is not None and length > table:
        raise UserError(
            f"data.block_size={length} is longer than the {table} learned positions of this run "
            f"(pos=learned, trained at data.block_size={trained}): evaluate at data.block_size<="
            f"{table}; the schemes that run past their trained length are pos in "
            f"{list(EXTENDING_POSITIONS)}"
        )


def wants_by_position(asked: Any, run_config: DictConfig) -> bool:
    """`by_position`: None is on for causal LM runs and off for the others; True is refused
    where there is no position to score by."""
    if asked is not None and not isinstance(asked, bool):
        raise UserError(f"by_position={asked!r} must be true, false or null (clm runs only)")
    target = run_config.objective.get("_target_")
    objective = objective_facts(target).name if target else None
    if asked and objective != "clm":
        raise UserError(
            f"by_position=true scores a causal LM's loss at each position of its windows, but "
            f"this run's objective is {objective}: leave by_position unset"
        )
    return objective == "clm" and asked is not False


def outputs_path(report: Path) -> Path:
    """Where the decoded outputs go: beside the report, eval.json -> eval.outputs.txt."""
    return report.with_name(f"{report.stem}.outputs.txt")
