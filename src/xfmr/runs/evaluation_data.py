"""What `xfmr-eval` (and `xfmr.Run.evaluate`) evaluates on: the run's data section with a
person's overrides, checked as xfmr-train checks data, before torch loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xfmr.checks import check_data
from xfmr.errors import UserError


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


def outputs_path(report: Path) -> Path:
    """Where the decoded outputs go: beside the report, eval.json -> eval.outputs.txt."""
    return report.with_name(f"{report.stem}.outputs.txt")
