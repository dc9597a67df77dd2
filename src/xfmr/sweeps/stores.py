"""The stores a sweep's jobs share, created once by the sweep's own process before its jobs
start, and found again by each job: jobs that start together would otherwise race to create
them. Only light imports here."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

from omegaconf import DictConfig

from xfmr.errors import UserError
from xfmr.sweeps.names import sweep_name


def ensure_mlflow_experiment(tracking_uri: str, name: str) -> str:
    """The id of the experiment `name` at `tracking_uri`, created if missing. Creating the first
    experiment also creates a SQLite store's tables, which two processes must not do at once."""
    try:
        import mlflow  # noqa: F401
    except ModuleNotFoundError:
        raise UserError("logger=mlflow needs MLflow: pip install 'xfmr[mlflow]'") from None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name)
        except MlflowException:  # another job created it since the lookup
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        raise UserError(
            f"logger.mlflow: experiment {name!r} at {tracking_uri} is deleted; restore it in "
            f"`mlflow ui`, remove it for good with `mlflow gc --backend-store-uri {tracking_uri}`, "
            "or name the runs' experiment otherwise (logger.mlflow.experiment_name=..., or "
            "hydra.sweep.dir=... for a sweep)"
        )
    return experiment.experiment_id


def prepare_mlflow_store(cfg: DictConfig) -> None:
    """Create the MLflow store and the experiment a sweep's runs share, if `cfg` logs to MLflow.

    Called once by the sweep's own process before its jobs start: jobs that start together
    would otherwise race to create the SQLite tables. Idempotent.

    Args:
        cfg: the composed config of the sweep, with its `hydra` node (the experiment is named
            by `sweep_name(cfg.hydra)`, as the jobs name it); without one, the experiment is
            `logger.mlflow.experiment_name`. `${hydra:...}` interpolations resolve against
            `cfg.hydra` where Hydra has not set its config in this process.
    """
    if (cfg.get("logger") or {}).get("mlflow") is None:
        return
    with _hydra_config(cfg):
        settings = cfg.logger.mlflow
        if "hydra" in cfg:
            name = sweep_name(cfg.hydra)
        else:
            name = str(settings.experiment_name)
        ensure_mlflow_experiment(str(settings.tracking_uri), name)


@contextmanager
def _hydra_config(cfg: DictConfig) -> Iterator[None]:
    """Hydra's config set from `cfg` while inside, unless Hydra has set it already."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized() or "hydra" not in cfg:
        yield
        return
    holder = HydraConfig.instance()
    holder.set_config(copy.deepcopy(cfg))
    try:
        yield
    finally:
        holder.cfg = None
