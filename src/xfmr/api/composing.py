"""Composing an experiment from Python as `xfmr-train` composes it from its arguments.

The same overrides, the same `--config-dir`, the same group-choice check, the same resolution
of `paths.*` (which names `${hydra:...}`, answered here as Hydra's own main answers it) and the
same `check_config`, so a config the command line refuses is refused here, with its message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from xfmr.api.choices import choice_problem, group_choices, not_a_choice
from xfmr.checks import check_config
from xfmr.errors import UserError
from xfmr.paths import config_dir as shipped_config_dir

TASK_NAME = "train"  # Hydra's job name for xfmr-train: its log is RUN_DIR/train.log
RUN_DIR_OVERRIDE = "hydra.run.dir="
# Run directories handed out by this process, so two experiments composed within one second
# (the default directory's resolution) do not share one.
_handed_out: set[Path] = set()


@dataclass(frozen=True)
class Experiment:
    """A composed and checked experiment: what `xfmr-train OVERRIDES` would train.

    Attributes:
        config: the resolved config; `paths.output_dir` is the run directory. `xfmr.train`
            trains a copy and checks it again, so edits made here are checked too.
        overrides: the overrides it was composed from (results.json records them, and
            `xfmr.compare` reads its columns from them).
        config_dir: the directory of the person's own configs (`--config-dir`), if any.
    """

    config: DictConfig
    overrides: tuple[str, ...] = ()
    config_dir: Path | None = field(default=None)

    @property
    def run_dir(self) -> Path:
        """Where it trains, `config.paths.output_dir`."""
        return Path(str(self.config.paths.output_dir))

    def __repr__(self) -> str:
        return f"Experiment({' '.join(self.overrides) or 'defaults'} -> {self.run_dir})"


def compose(*overrides: str, config_dir: str | Path | None = None) -> Experiment:
    """Compose and check an experiment from `xfmr-train`'s overrides.

    Args:
        *overrides: `GROUP=CHOICE` and `KEY=VALUE` as on the command line, e.g. `"size=tiny"`,
            `"optim.lr=1e-3"`, `"hydra.run.dir=runs/a"` (where the run goes; by default
            `outputs/train/runs/DATE_TIME` under the current directory, as the command line).
        config_dir: a directory of your own configs, as `xfmr-train --config-dir DIR`.

    Raises:
        UserError: the command line's one-line message for a config it would refuse.
    """
    arguments = _strings(overrides)
    extra = _config_dir(config_dir)
    dirs = [shipped_config_dir(), *([extra] if extra else [])]
    problem = choice_problem(arguments, dirs)
    if problem:
        raise UserError(problem)
    composed = _compose("train", arguments, extra, with_hydra=True)
    given_dir = any(a.startswith(RUN_DIR_OVERRIDE) for a in arguments)
    resolved, task_overrides = _resolve(composed, unique_dir=not given_dir)
    check_config(resolved)
    return Experiment(resolved, tuple(task_overrides), extra)


def _strings(overrides: Sequence[Any]) -> list[str]:
    """Overrides given one by one or as one list (`compose(*sweep)` or `compose(sweep)`)."""
    if len(overrides) == 1 and isinstance(overrides[0], list | tuple):
        overrides = overrides[0]
    if not all(isinstance(o, str) for o in overrides):
        raise UserError(
            f"overrides are strings such as 'size=tiny' or 'optim.lr=1e-3', not {list(overrides)!r}"
        )
    return list(overrides)


def tool_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config of another entry point (conf/generate.yaml, conf/eval.yaml, ...) with
    overrides, e.g. `generation=beam`; a choice that does not exist is a UserError."""
    for argument in overrides:
        group, _, value = argument.partition("=")
        if group == "generation":
            choices = group_choices(group, [shipped_config_dir()])
            if value not in choices:
                raise UserError(not_a_choice(group, value, choices))
    return _compose(config_name, list(overrides), None, with_hydra=False)


def _config_dir(given: str | Path | None) -> Path | None:
    if given is None:
        return None
    path = Path(given).expanduser().absolute()
    if not path.is_dir():
        raise UserError(f"config_dir={str(given)!r} is not a directory of configs")
    return path


def _compose(
    config_name: str, overrides: list[str], extra: Path | None, *, with_hydra: bool
) -> DictConfig:
    """Hydra's compose over the shipped configs (and `extra`, searched as --config-dir is);
    Hydra's complaint as one line."""
    from hydra import compose as hydra_compose
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    search_path = create_config_search_path(str(shipped_config_dir()))
    if extra is not None:  # where xfmr-train --config-dir puts it (hydra._internal.utils)
        search_path.prepend(
            provider="command-line", path=f"file://{extra}", anchor=SearchPathQuery("schema")
        )
    was_initialized = GlobalHydra.instance().is_initialized()
    previous = GlobalHydra.instance().hydra if was_initialized else None
    GlobalHydra.instance().clear()
    try:
        Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=search_path)
        return hydra_compose(config_name, overrides, return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException) as e:
        cause = f"{e.__cause__}" if e.__cause__ is not None else ""
        raise UserError(_one_line(f"{e}\n{cause}")) from None
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return message
    first = lines[0]
    said = next((line for line in lines[1:] if line.startswith("Key '")), None)
    return f"{first} {said}" if said else first  # "Could not override 'x'. Key 'x' is not..."


def _resolve(composed: DictConfig, *, unique_dir: bool) -> tuple[DictConfig, list[str]]:
    """The job's config resolved as under Hydra's main: `${hydra:runtime.cwd}` is the current
    directory and `${hydra:runtime.output_dir}` the run directory (`hydra.run.dir`). Hydra's
    global config is put back afterwards."""
    from hydra.core.hydra_config import HydraConfig

    holder = HydraConfig.instance()
    previous = holder.cfg
    try:
        holder.set_config(composed)  # for ${hydra:runtime.cwd} in hydra.run.dir
        run_dir = Path(str(composed.hydra.run.dir)).absolute()
        if unique_dir:
            run_dir = _unused(run_dir)
        OmegaConf.set_readonly(composed.hydra, False)
        with open_dict(composed):
            composed.hydra.runtime.output_dir = str(run_dir)
        holder.set_config(composed)
        overrides = list(composed.hydra.overrides.task)
        job = OmegaConf.masked_copy(composed, [k for k in composed if k != "hydra"])
        resolved = OmegaConf.create(OmegaConf.to_container(job, resolve=True))
    except OmegaConfBaseException as e:  # an interpolation or type error, as xfmr-train says
        raise UserError(f"config: {e}".split("\n    full_key")[0]) from None
    finally:
        holder.cfg = previous
    _handed_out.add(run_dir)
    return resolved, overrides


def _unused(run_dir: Path) -> Path:
    """`run_dir`, or `run_dir_2`, `_3`, ... if it exists or was handed out already."""
    candidate, number = run_dir, 1
    while candidate in _handed_out or candidate.exists():
        number += 1
        candidate = run_dir.with_name(f"{run_dir.name}_{number}")
    return candidate
