"""The name a sweep's runs share in every dashboard (MLflow experiment, wandb group, Optuna study)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def sweep_name(hydra_cfg: Any) -> str:
    """`hydra.sweeper.study_name` when set, else the sweep directory's name
    (`hydra.sweep.dir=outputs/lr_search` gives `lr_search`)."""
    sweeper = hydra_cfg.get("sweeper") or {}
    name = sweeper.get("study_name") if hasattr(sweeper, "get") else None
    return str(name) if name else Path(str(hydra_cfg.sweep.dir)).name
