"""One sweep from start to end: the jobs (a grid, or a search's trials), then `sweep.json` and
the summary, and a non-zero exit when more jobs failed than the sweep allows."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from xfmr.errors import UserError
from xfmr.files import atomic_path
from xfmr.run_dir.files import MULTIRUN_FILE, make_writable_dir
from xfmr.sweeps.gpus import GpuPool, describe_groups, sweep_gpus
from xfmr.sweeps.jobs import divide_threads, end_of_jobs
from xfmr.sweeps.names import sweep_name
from xfmr.sweeps.runner import JobRunner, run_grid
from xfmr.sweeps.search import search_space, storage_spec
from xfmr.sweeps.stores import check_shared_stores
from xfmr.sweeps.study import Search, SearchSettings, versions
from xfmr.sweeps.summary import failed_too_often, report, summarize, write_summary

log = logging.getLogger("xfmr")


def run_sweep(
    sweeper: Any, *, hydra_context: Any, config: DictConfig, launcher: Any, arguments: list[str]
) -> dict[str, Any]:
    """`sweeper` holds the `hydra.sweeper` settings; `arguments` are the command line's overrides."""
    sweep_dir = fix_sweep_dir(config)
    make_writable_dir(sweep_dir, key="hydra.sweep.dir")
    with atomic_path(sweep_dir / MULTIRUN_FILE) as temporary:
        OmegaConf.save(config, temporary)
    overrides = parse(hydra_context, [*_params(sweeper.params), *arguments])
    metric = str(config.get("optimized_metric") or "val/loss")
    direction = str(sweeper.direction)
    check_sweep(sweeper, config, overrides, launcher=type(launcher).__name__)
    use_gpus(launcher, config, int(sweeper.workers))
    divide_threads(int(sweeper.workers))
    prepare_loggers(config)
    runner = JobRunner(launcher, hydra_context.config_loader, config, metric)
    try:
        if sweeper.sampler:
            outcomes, extra, kind = _search(sweeper, config, runner, overrides, sweep_dir)
        else:
            outcomes, kind = _grid(sweeper, runner, overrides), "grid"
            extra = {"versions": versions(search=False)}
    finally:
        end_of_jobs()
    summary = summarize(outcomes, kind=kind, metric=metric, direction=direction, extra=extra)
    report(summary, write_summary(sweep_dir, summary))
    if failed_too_often(summary, float(sweeper.max_failure_rate)):
        log.error(
            "sweep: %d of %d jobs failed (hydra.sweeper.max_failure_rate=%s)",
            summary["counts"]["failed"] + summary["counts"]["interrupted"],
            len(summary["jobs"]),
            sweeper.max_failure_rate,
        )
        raise SystemExit(1)
    return summary


def fix_sweep_dir(config: DictConfig) -> Path:
    """The sweep directory as an absolute path, fixed once: every job (each in a process of
    its own, where `${now:...}` would give another time) and a resumed sweep see the same."""
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(config)  # the default dir goes through ${hydra:runtime.cwd}
    sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
    with read_write(config.hydra.sweep), open_dict(config.hydra.sweep):
        config.hydra.sweep.dir = str(sweep_dir)
    return sweep_dir


def _params(params: Any) -> list[str]:
    return [f"{key}={value}" for key, value in (params or {}).items()]


def parse(hydra_context: Any, overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create(config_loader=hydra_context.config_loader).parse_overrides(
        overrides
    )


def check_sweep(sweeper: Any, config: DictConfig, overrides: list[Any], *, launcher: str) -> None:
    """What a sweep is refused for before its first job: the `hydra.sweeper` settings, stores
    its jobs cannot share, and an interval(...) in a grid. `overrides` are Hydra's parsed
    overrides, `launcher` the launcher's class name."""
    direction = str(sweeper.direction)
    if direction not in ("minimize", "maximize"):
        raise UserError(f"hydra.sweeper.direction={direction!r}; valid: minimize, maximize")
    _check_workers(launcher, sweeper.workers)
    check_shared_stores(config, sweeper.storage if sweeper.sampler else None)
    if sweeper.sampler:
        return
    for override in overrides:
        if override.is_interval_sweep():
            raise UserError(
                f"{override.get_key_element()}: interval(...) needs a search, not a grid: add "
                "hparams_search=NAME or hydra.sweeper.sampler=tpe"
            )


def _check_workers(launcher: str, workers: Any) -> None:
    if not isinstance(workers, int) or workers < 1:
        raise UserError(f"hydra.sweeper.workers={workers!r}; give a whole number >= 1")
    if workers > 1 and launcher == "BasicLauncher":
        raise UserError(
            "hydra.sweeper.workers>1 needs jobs in processes of their own: use xfmr's "
            "launcher (the default) or hydra/launcher=submitit_local|submitit_slurm"
        )


def use_gpus(launcher: Any, config: DictConfig, workers: int) -> None:
    """xfmr's launcher gives each job its GPUs; a request the visible GPUs cannot meet is
    refused here, before any job starts. (Another launcher places its jobs itself: submitit's
    `gpus_per_node`.)"""
    if not hasattr(launcher, "gpu_pool"):
        return
    share = bool(getattr(launcher.settings, "share_gpus", False))
    groups = sweep_gpus(config, workers, share=share)
    launcher.gpu_pool = GpuPool(groups) if groups else None
    if groups:
        log.info("sweep: %s (given to the job as CUDA_VISIBLE_DEVICES)", describe_groups(groups))


def prepare_loggers(config: DictConfig) -> None:
    """A store that parallel jobs share is created once, here, before they start."""
    if (config.get("logger") or {}).get("mlflow") is None:
        return
    from xfmr.sweeps.stores import prepare_mlflow_store

    prepare_mlflow_store(config)


def _grid(sweeper: Any, runner: JobRunner, overrides: list[Any]) -> list[Any]:
    return run_grid(runner, grid_jobs(overrides), int(sweeper.workers))


def grid_jobs(overrides: list[Any]) -> list[list[str]]:
    """A grid's jobs, each its `KEY=VALUE` overrides, from Hydra's parsed `overrides`: each
    sweep (`a,b`, `range(...)`, `glob(...)`) expanded, and every combination taken with the
    first key's values changing slowest, in the order Hydra's own BasicSweeper runs them
    (hydra-core 1.3). A key given twice keeps its first place and its last values."""
    values: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            assert override.is_discrete_sweep(), "check_sweep refuses interval(...) in a grid"
            values[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            values[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*values.values())]


def _search(
    sweeper: Any, config: DictConfig, runner: JobRunner, overrides: list[Any], sweep_dir: Path
) -> tuple[list[Any], dict[str, Any], str]:
    params, fixed = search_space(overrides)
    if not params:
        raise UserError(
            "a search needs a search space: set hydra.sweeper.params (hparams_search=NAME) "
            "or sweep a key on the command line, e.g. 'optim.lr=tag(log, interval(1e-4, 1e-2))'"
        )
    if not isinstance(sweeper.n_trials, int) or sweeper.n_trials < 1:
        raise UserError(f"hydra.sweeper.n_trials={sweeper.n_trials!r}; give a whole number >= 1")
    settings = SearchSettings(
        storage=storage_spec(sweeper.storage, sweep_dir),
        study_name=sweep_name(config.hydra),
        direction=str(sweeper.direction),
        n_trials=int(sweeper.n_trials),
        workers=int(sweeper.workers),
        sampler=str(sweeper.sampler),
        sampler_args=_plain(sweeper.sampler_args),
        pruner=sweeper.pruner,
        pruner_args=_plain(sweeper.pruner_args),
    )
    search = Search(runner, settings, params, fixed)
    search.run()
    extra = {"study_name": settings.study_name, "storage": settings.storage, "versions": versions()}
    return search.outcomes(), extra, "search"


def _plain(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    return (
        OmegaConf.to_container(section, resolve=True)
        if OmegaConf.is_config(section)
        else dict(section)
    )
