"""The Optuna side of a search: the search space from Hydra's sweep syntax, samplers and pruners
by name, and where a sweep's study lives. Optuna does all the searching; this module only
translates xfmr's config into Optuna's objects."""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.run_dir.files import JOURNAL_FILE

log = logging.getLogger("xfmr")

# name -> (Optuna class, what it needs); one table, so `hydra.sweeper.sampler=NAME` is the choice.
SAMPLERS = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "cmaes": "CmaEsSampler",
    "qmc": "QMCSampler",
}
# What xfmr asks of a sampler where Optuna's default changed between major versions, so that
# a search proposes the same trials under Optuna 4 and 5 (`hydra.sweeper.sampler_args` still
# overrides each): TPE models the parameters jointly (Bergstra et al. 2013's independent TPE
# ignores how, say, the learning rate and the warm-up interact), and parallel workers see each
# other's running trials as already scored (a constant liar), so they do not propose the same
# point. Both are Optuna 5's defaults, and were Optuna 4's experimental options.
SAMPLER_DEFAULTS = {"tpe": {"multivariate": True, "constant_liar": True}}
PRUNERS = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "hyperband": "HyperbandPruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "none": "NopPruner",
}


@dataclass(frozen=True)
class Param:
    """One searched override: its key, Optuna distribution, and how a value goes back into
    an override string."""

    key: str
    distribution: Any

    def override(self, value: Any) -> str:
        return f"{self.key}={format_value(value)}"


def format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def search_space(overrides: list[Any]) -> tuple[list[Param], list[str]]:
    """Hydra's parsed overrides -> (searched params, fixed overrides). `a,b` and `choice(a,b)`
    become categorical; `range(lo,hi,step)` an int (or stepped float) distribution over the same
    values; `interval(lo,hi)` a float (int if both ends are ints) distribution;
    `tag(log, ...)` makes it log-scaled."""
    params, fixed = [], []
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            fixed.append(f"{key}={override.get_value_element_as_str()}")
        else:
            params.append(Param(key, _distribution(override, key)))
    return params, fixed


def _distribution(override: Any, key: str) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    log = "log" in getattr(value, "tags", set())
    if override.is_interval_sweep():
        low, high = value.start, value.end
        if isinstance(low, int) and isinstance(high, int):
            return IntDistribution(low, high, log=log)
        return FloatDistribution(float(low), float(high), log=log)
    if override.is_range_sweep():
        values = list(override.sweep_iterator())
        if not values:
            raise UserError(f"{key}: the range is empty")
        step = value.step
        if all(isinstance(v, int) for v in values):
            return IntDistribution(values[0], values[-1], step=1 if log else step, log=log)
        return FloatDistribution(values[0], values[-1], step=None if log else float(step), log=log)
    typed = list(override.sweep_iterator())
    if all(v is None or isinstance(v, (bool, int, float)) for v in typed):
        return CategoricalDistribution(typed)
    return CategoricalDistribution(list(override.sweep_string_iterator()))


def grid_space(params: list[Param]) -> dict[str, list[Any]]:
    """GridSampler's search space: every value of each param; intervals have none."""
    from optuna.distributions import CategoricalDistribution

    space = {}
    for param in params:
        dist = param.distribution
        if isinstance(dist, CategoricalDistribution):
            space[param.key] = list(dist.choices)
        elif getattr(dist, "step", None) and not dist.log:
            count = int(round((dist.high - dist.low) / dist.step)) + 1
            space[param.key] = [dist.low + i * dist.step for i in range(count)]
        else:
            raise UserError(
                f"hydra.sweeper.sampler=grid needs values it can list: {param.key} is an "
                f"interval; give choice(...) or range(...), or pick another sampler "
                f"({', '.join(s for s in SAMPLERS if s != 'grid')})"
            )
    return space


def build_sampler(name: str, args: dict[str, Any], params: list[Param], *, seed_offset: int):
    """`seed_offset` (the number of trials already in the study) moves a seeded sampler on when
    a sweep resumes, so it does not propose its first points again."""
    import optuna

    if name not in SAMPLERS:
        raise UserError(
            f"hydra.sweeper.sampler={name!r} is not a sampler; valid: {', '.join(SAMPLERS)}"
        )
    kind = getattr(optuna.samplers, SAMPLERS[name])
    args = {**SAMPLER_DEFAULTS.get(name, {}), **args}
    kwargs = applicable(kind, args, f"hydra.sweeper.sampler={name}")
    if kwargs.get("seed") is not None:
        kwargs["seed"] = int(kwargs["seed"]) + seed_offset
    if name == "grid":
        kwargs["search_space"] = grid_space(params)
    try:
        with warnings.catch_warnings():  # Optuna 4 calls SAMPLER_DEFAULTS' options experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return kind(**kwargs)
    except (TypeError, ValueError) as e:
        raise UserError(f"hydra.sweeper.sampler_args: {e}") from None


def applicable(kind: type, args: dict[str, Any], choice: str) -> dict[str, Any]:
    """The arguments `kind` takes. The others are dropped with a note, so that switching the
    sampler or pruner of an hparams_search file on the command line just works (TPE's
    n_startup_trials means nothing to QMC)."""
    import inspect

    accepted = inspect.signature(kind).parameters
    dropped = sorted(k for k in args if k not in accepted)
    if dropped:
        log.info("%s does not take %s: left out", choice, ", ".join(dropped))
    return {k: v for k, v in args.items() if k in accepted}


def build_pruner(name: str | None, args: dict[str, Any]):
    """The same pruner in the sweeper and in every trial's job: Optuna does not store it with
    the study, so a job that reconnects to its trial builds it again from the config."""
    import optuna

    name = name or "none"
    if name not in PRUNERS:
        raise UserError(
            f"hydra.sweeper.pruner={name!r} is not a pruner; valid: {', '.join(PRUNERS)}"
        )
    kind = getattr(optuna.pruners, PRUNERS[name])
    try:
        return kind(**applicable(kind, dict(args or {}), f"hydra.sweeper.pruner={name}"))
    except (TypeError, ValueError) as e:
        raise UserError(f"hydra.sweeper.pruner_args: {e}") from None


def storage_spec(storage: str | None, sweep_dir: str | Path) -> str:
    """Where the study lives: Optuna's journal file in the sweep directory by default (several
    processes may share it), else the given Optuna storage URL or journal file path."""
    return str(storage) if storage else str(Path(sweep_dir).resolve() / JOURNAL_FILE)


def open_storage(spec: str):
    """An RDB URL (`sqlite:///...`, `postgresql://...`) as Optuna takes it; anything else is the
    path of a journal file, locked by Optuna's default JournalFileSymlinkLock: a symlink made
    atomically, which holds between hosts on NFS, Lustre and GPFS, where `flock` may not."""
    import optuna

    if "://" in spec:
        return spec
    from optuna.storages.journal import JournalFileBackend

    Path(spec).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(spec))


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
