"""The job's side of a search: which study trial this job is (`trial` in the run's config), read
from the sweeper's config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import OmegaConf

from xfmr.sweeps.names import sweep_name
from xfmr.sweeps.search import storage_spec

_SWEEPER = "hydra_plugins.xfmr_sweeper.plugins.XfmrSweeper"


@dataclass(frozen=True)
class TrialConfig:
    """The study trial a search job reports each validation to, and the pruner that judges it.

    Args:
        storage: the study's storage (`xfmr.sweeps.search.storage_spec`).
        study_name: the study (the sweep's name).
        number: the trial's number, which is the job's.
        metric: the metric reported (`optimized_metric`).
        pruner, pruner_args: the sweep's pruner, built again in the job.
    """

    storage: Any
    study_name: str
    number: int
    metric: str
    pruner: str | None = None
    pruner_args: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> TrialConfig | None:
        """The `trial` section of a saved config (None outside a search)."""
        return cls(**dict(values)) if values else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pruner_args": dict(self.pruner_args)}


def trial_of_job(hydra_cfg: Any, *, metric: str) -> TrialConfig | None:
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
    return TrialConfig(
        storage=storage_spec(sweeper.get("storage"), hydra_cfg.sweep.dir),
        study_name=sweep_name(hydra_cfg),
        number=int(hydra_cfg.job.num),
        metric=metric,
        pruner=sweeper.get("pruner"),
        pruner_args=_plain(sweeper.get("pruner_args")),
    )


def _plain(section: Any) -> dict[str, Any]:
    if OmegaConf.is_config(section):
        return OmegaConf.to_container(section, resolve=True)
    return dict(section or {})
