"""A job of a sweep: its config, made and checked as one run's (`xfmr.config`), with what the
sweep adds: the study trial it reports to, and its name in every dashboard (a wandb run in the
sweep's group, an MLflow run in the sweep's experiment tagged with the sweep and job number)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from xfmr.api.composing import resolution_problem
from xfmr.config import RunConfig
from xfmr.config.make import run_config
from xfmr.config.origins import origins
from xfmr.errors import UserError
from xfmr.paths import config_dir

_CHECKED_FIRST = "__xfmr_checked_first__"


def checked_first(task_function: Any) -> Any:
    """Marks Hydra's task function as one whose jobs are made with `job_config`, so that
    xfmr's sweeper checks the first job before the sweep starts (`check_first_job`). A mark on
    the function, not its module's name: `python -m xfmr.cli.train` runs it as `__main__`."""
    setattr(task_function, _CHECKED_FIRST, True)
    return task_function


def is_checked_first(task_function: Any) -> bool:
    """Whether `task_function`'s jobs are xfmr runs (`checked_first`); another app's are its own."""
    return bool(getattr(task_function, _CHECKED_FIRST, False))


def job_config(cfg: DictConfig, hydra_cfg: DictConfig, overrides: Sequence[str]) -> RunConfig:
    """The job's run config: `cfg` (the job's composed config, under Hydra's main) read and
    checked once, named for the sweep, with its trial in a search."""
    from omegaconf.errors import OmegaConfBaseException

    from xfmr.sweeps.trial import trial_of_job

    try:
        values = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise UserError(resolution_problem(e)) from None
    dirs = [config_dir(), *_searched(hydra_cfg)]
    config = run_config(values, origins(_with_hydra(cfg, hydra_cfg), dirs, overrides))
    trial = trial_of_job(hydra_cfg, metric=str(config.optimized_metric or "val/loss"))
    return named_for_sweep(config.replace(trial=trial), hydra_cfg)


def check_first_job(
    hydra_context: Any, config: DictConfig, sweeper: Any, arguments: list[str]
) -> None:
    """A grid's first job composed and read into its run config, as the job will be: a mistake
    every job would make (a misspelt key, a file that is not there) is refused once, in one
    line, before the sweep starts. A search's trials are judged each as it comes."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from xfmr.api.composing import _missing_key, _one_line, _refusal_of
    from xfmr.sweeps.jobs import composed_job
    from xfmr.sweeps.sweep import grid_jobs, parse

    if sweeper.sampler:
        return
    params = [f"{key}={value}" for key, value in (sweeper.params or {}).items()]
    overrides = parse(hydra_context, [*params, *arguments])
    if any(o.is_interval_sweep() for o in overrides):
        return  # check_sweep refuses it, naming the key
    first = grid_jobs(overrides)[0]
    try:
        job = composed_job(hydra_context.config_loader, config, first, 0)
    except (HydraException, OmegaConfBaseException) as e:
        cause = f"{e.__cause__}" if e.__cause__ is not None else ""
        message = _one_line(f"{e}\n{cause}")
        missing = _missing_key(message, first)
        raise UserError(_refusal_of(missing, first, None) if missing else message) from None
    job = copy.deepcopy(job)  # the launcher runs the one composed; this one is checked
    with read_write(job.hydra), open_dict(job.hydra):  # where Hydra will run it: sweep.dir/N
        job.hydra.runtime.output_dir = str(job.hydra.sweep.dir) + "/" + str(job.hydra.sweep.subdir)
    holder = HydraConfig.instance()
    previous = holder.cfg
    try:
        holder.set_config(job)  # for ${hydra:runtime.output_dir} and the like
        values = OmegaConf.to_container(
            OmegaConf.masked_copy(job, [k for k in job if k != "hydra"]), resolve=True
        )
    except OmegaConfBaseException as e:
        raise UserError(resolution_problem(e)) from None
    finally:
        holder.cfg = previous
    run_config(values)


def named_for_sweep(config: RunConfig, hydra_cfg: DictConfig) -> RunConfig:
    """In a multirun each job is one run of its sweep in every dashboard: a wandb run in the
    sweep's group, an MLflow run in the sweep's experiment tagged with the sweep and job
    number; named after the job's overrides."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN:
        return config
    from xfmr.sweeps.names import sweep_name

    sweep = sweep_name(hydra_cfg)
    job_name = hydra_cfg.job.override_dirname or f"job{hydra_cfg.job.num}"
    loggers = config.logger
    if (wandb := loggers.get("wandb")) is not None:
        loggers = loggers.replaced(
            "wandb", group=wandb.get("group") or sweep, name=wandb.get("name") or job_name
        )
    if (mlflow := loggers.get("mlflow")) is not None:
        tags = {
            **(mlflow.get("tags") or {}),
            "xfmr.sweep": sweep,
            "xfmr.job": str(hydra_cfg.job.num),
        }
        loggers = loggers.replaced(
            "mlflow", experiment_name=sweep, run_name=mlflow.get("run_name") or job_name, tags=tags
        )
    return config.replace(logger=loggers)


def _with_hydra(cfg: DictConfig, hydra_cfg: DictConfig) -> Any:
    """What `origins` reads: the job's choices, under `hydra`."""
    return OmegaConf.create({"hydra": {"runtime": {"choices": hydra_cfg.runtime.choices}}})


def _searched(hydra_cfg: DictConfig) -> list[Any]:
    """The directories the person's own configs came from (`--config-dir`, hydra.searchpath)."""
    from pathlib import Path

    found = []
    for source in hydra_cfg.runtime.get("config_sources") or []:
        path = str(source.get("path") or "")
        if source.get("schema") == "file" and source.get("provider") != "main":
            found.append(Path(path))
    return found
