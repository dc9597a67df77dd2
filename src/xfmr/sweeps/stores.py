"""The stores a sweep's jobs share, created once by the sweep's own process before its jobs
start, and found again by each job: jobs that start together would otherwise race to create
them. Only light imports here.

Jobs that may run on several hosts (SLURM) write to these stores from each host. SQLite is then
refused: it relies on POSIX locks, which network filesystems (NFS, Lustre, GPFS) often keep per
host or refuse, so two hosts can corrupt one database. What is safe from several hosts: an MLflow
tracking server or a server database (postgresql://, mysql://), MLflow's file store (one writer
per run's folder), and Optuna's journal file, the default (its lock is a symlink created
atomically, made for NFS).
"""

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


def hosts_of_jobs(hydra_cfg: DictConfig) -> str | None:
    """The setting by which a sweep's jobs may run on several hosts, or None if they share
    the sweep's host."""
    launcher = hydra_cfg.get("launcher") or {}
    if str(launcher.get("_target_", "")).endswith(".SlurmLauncher"):
        return "hydra/launcher=submitit_slurm"
    nodes = launcher.get("nodes")
    if isinstance(nodes, int) and nodes > 1:
        return f"hydra.launcher.nodes={nodes}"
    return None


def check_shared_stores(cfg: DictConfig, optuna_storage: str | None) -> None:
    """Refuse a SQLite store that jobs on several hosts would write to, naming what to set.

    Args:
        cfg: the sweep's composed config, with its `hydra` node.
        optuna_storage: a search's `hydra.sweeper.storage` (None: the journal file; a grid has
            no study).
    """
    hosts = hosts_of_jobs(cfg.hydra)
    if hosts is None:
        return
    if (cfg.get("logger") or {}).get("mlflow") is not None:
        with _hydra_config(cfg):
            tracking_uri = str(cfg.logger.mlflow.tracking_uri)
        if tracking_uri.startswith("sqlite:"):
            raise UserError(
                f"logger.mlflow.tracking_uri={tracking_uri}: SQLite is not safe for jobs on "
                f"several hosts ({hosts}), its locks do not hold across hosts on a network "
                "filesystem; set logger.mlflow.tracking_uri=http://HOST:5000 (an `mlflow "
                "server` the jobs reach), a postgresql:// or mysql:// URL, or file:DIR with "
                "MLFLOW_ALLOW_FILE_STORE=true exported (MLflow's file store)"
            )
    if optuna_storage is not None and str(optuna_storage).startswith("sqlite:"):
        raise UserError(
            f"hydra.sweeper.storage={optuna_storage}: SQLite is not safe for jobs on several "
            f"hosts ({hosts}), its locks do not hold across hosts on a network filesystem; "
            "leave hydra.sweeper.storage unset (Optuna's journal file in the sweep directory, "
            "made for NFS) or give a postgresql:// or mysql:// URL"
        )


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
