"""The job's side of a search: which study trial this job is, read from the sweeper's config."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from xfmr.sweeps.names import sweep_name
from xfmr.sweeps.search import storage_spec

_SWEEPER = "hydra_plugins.xfmr_sweeper.plugins.XfmrSweeper"


def trial_of_job(hydra_cfg: Any, *, metric: str) -> dict[str, Any] | None:
    """The trial a search job reports to (its number is the job's number: the sweeper
    launches trial N as job N), or None outside a search."""
    from hydra.types import RunMode

    sweeper = hydra_cfg.get("sweeper") or {}
    if (
        hydra_cfg.mode != RunMode.MULTIRUN
        or sweeper.get("_target_") != _SWEEPER
        or not sweeper.get("sampler")
    ):
        return None
    return {
        "storage": storage_spec(sweeper.get("storage"), hydra_cfg.sweep.dir),
        "study_name": sweep_name(hydra_cfg),
        "number": int(hydra_cfg.job.num),
        "metric": metric,
        "pruner": sweeper.get("pruner"),
        "pruner_args": _plain(sweeper.get("pruner_args")),
    }


def _plain(section: Any) -> dict[str, Any]:
    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    return dict(section or {})
