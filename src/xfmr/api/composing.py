"""Composing an experiment: `xfmr-train`'s arguments, or `xfmr.compose(...)`'s, into the run's
typed config, made once and checked (`xfmr.config`).

The same overrides, the same `--config-dir`, the same group-choice check, the same resolution
of `paths.*` (which names `${hydra:...}`, answered here as Hydra's own main answers it) and the
same checks for the command line and Python, so a config the one refuses is refused by the
other, with its message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from xfmr.api.choices import choice_problem, group_choices, not_a_choice
from xfmr.config import RunConfig
from xfmr.config.make import run_config
from xfmr.config.origins import origins
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
        config: the run's config (`xfmr.config.RunConfig`), typed, checked and resolved;
            `config.paths.output_dir` is the run directory. Frozen: compose again with other
            overrides to change it.
        overrides: the overrides it was composed from (results.json records them, and
            `xfmr.compare` reads its columns from them).
        config_dir: the directory of the person's own configs (`--config-dir`), if any.
        run_dir_given: the run directory was named (`hydra.run.dir=`), not chosen.
    """

    config: RunConfig
    overrides: tuple[str, ...] = ()
    config_dir: Path | None = field(default=None)
    run_dir_given: bool = False

    @property
    def run_dir(self) -> Path:
        """Where it trains, `config.paths.output_dir`."""
        return self.config.run_dir

    def __repr__(self) -> str:
        return f"Experiment({' '.join(self.overrides) or 'defaults'} -> {self.run_dir})"


def compose(
    *overrides: str, config_dir: str | Path | None = None, unique_dir: bool | None = None
) -> Experiment:
    """Compose and check an experiment from `xfmr-train`'s overrides.

    Args:
        *overrides: `GROUP=CHOICE` and `KEY=VALUE` as on the command line, e.g. `"size=tiny"`,
            `"optim.lr=1e-3"`, `"hydra.run.dir=runs/a"` (where the run goes; by default
            `outputs/train/runs/DATE_TIME` under the current directory, as the command line).
        config_dir: a directory of your own configs, as `xfmr-train --config-dir DIR`.
        unique_dir: a default run directory that exists or was handed out already becomes
            `DIR_2`, `_3`, ... (the default from Python; the command line keeps Hydra's).

    Raises:
        UserError: the command line's one-line message for a config it would refuse.
    """
    arguments = _strings(overrides)
    _check_grammar(arguments)
    extra = _config_dir(config_dir)
    dirs = [shipped_config_dir(), *([extra] if extra else [])]
    problem = choice_problem(arguments, dirs)
    if problem:
        raise UserError(problem)
    composed = compose_hydra("train", arguments, extra, with_hydra=True)
    given_dir = any(a.startswith(RUN_DIR_OVERRIDE) for a in arguments)
    values, task_overrides = _resolve(
        composed, unique_dir=not given_dir and unique_dir is not False
    )
    config = run_config(values, origins(composed, dirs, task_overrides))
    return Experiment(config, tuple(task_overrides), extra, given_dir)


def _check_grammar(arguments: list[str]) -> None:
    """Each argument is one Hydra's override grammar reads (`key=value`, `group=choice`, a
    sweep), else one line naming it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for argument in arguments:
        try:
            override = parser.parse_override(argument)
        except HydraException as e:
            said = " ".join(str(e).split("See https://")[0].split())
            raise UserError(
                f"could not read {argument!r} ({said}): quote a value that holds brackets, "
                "commas or spaces, e.g. 'data.path=\"a, b.txt\"'"
            ) from None
        if override.is_sweep_override():  # Hydra says only "Ambiguous value for argument"
            raise UserError(
                f"{argument!r} gives several values, a sweep: add -m to run one job for each "
                "(xfmr-train -m ...), or give one value; a list value goes in brackets, quoted "
                "('optim.betas=[0.9,0.95]')"
            )


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
    return compose_hydra(config_name, list(overrides), None, with_hydra=False)


def _config_dir(given: str | Path | None) -> Path | None:
    if given is None:
        return None
    path = Path(given).expanduser().absolute()
    if not path.is_dir():
        raise UserError(f"config_dir={str(given)!r} is not a directory of configs")
    return path


def compose_hydra(
    config_name: str, overrides: list[str], extra: Path | None, *, with_hydra: bool
) -> DictConfig:
    """Hydra's compose over the shipped configs (and `extra`, searched where `--config-dir`
    puts a directory: `hydra.searchpath`, after the shipped ones); Hydra's complaint as one
    line, a key a section does not have as the section says it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    searched = [f"hydra.searchpath=[file://{extra}]"] if extra is not None else []
    # Inside Hydra's main (a sweep's check) Hydra is set up already: put it back afterwards.
    running = GlobalHydra.instance()
    previous = running.hydra if running.is_initialized() else None
    running.clear()
    try:
        with initialize_config_dir(
            config_dir=str(shipped_config_dir()), version_base="1.3", job_name=TASK_NAME
        ):
            return hydra_compose(
                config_name, [*overrides, *searched], return_hydra_config=with_hydra
            )
    except (HydraException, OmegaConfBaseException) as e:
        cause = f"{e.__cause__}" if e.__cause__ is not None else ""
        message = _one_line(f"{e}\n{cause}")
        missing = _missing_key(message, overrides)
        if missing is not None and config_name == "train":
            raise UserError(_refusal_of(missing, overrides, extra)) from None
        raise UserError(message) from None
    finally:
        if previous is not None:
            running.clear()
            running.initialize(previous)


def _missing_key(message: str, overrides: list[str]) -> str | None:
    """The override whose key the config does not have (Hydra: "Could not override 'KEY'")."""
    if not message.startswith("Could not override '"):
        return None
    key = message.split("'")[1]
    return next((o for o in overrides if o.split("=", 1)[0] == key), None)


def _refusal_of(override: str, overrides: list[str], extra: Path | None) -> str:
    """What the run's config says of a key its section does not have: composed with the key
    added (`+KEY=VALUE`), the section refuses it, naming the nearest keys; a key the section
    takes (a keyword of its class that the config file leaves out) is added that way."""
    key = override.split("=", 1)[0]
    added = [f"+{o}" if o == override else o for o in overrides]
    try:
        composed = compose_hydra("train", added, extra, with_hydra=True)
        values, _ = _resolve(composed, unique_dir=False, remember=False)
        run_config(values)
    except UserError as e:
        if key in str(e):
            return str(e)
    return (
        f"{key} is not in the composed config: its section takes it, so add it with "
        f"+{override} (a key a group's file does not list)"
    )


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return message
    first = lines[0]
    said = next((line for line in lines[1:] if line.startswith("Key '")), None)
    return f"{first} {said}" if said else first  # "Could not override 'x'. Key 'x' is not..."


def _resolve(
    composed: DictConfig, *, unique_dir: bool, remember: bool = True
) -> tuple[dict[str, Any], list[str]]:
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
        values = OmegaConf.to_container(job, resolve=True)
    except OmegaConfBaseException as e:  # an interpolation or type error, as xfmr-train says
        raise UserError(resolution_problem(e)) from None
    finally:
        holder.cfg = previous
    if remember:
        _handed_out.add(run_dir)
    return values, overrides


def resolution_problem(error: BaseException) -> str:
    """One line for an interpolation that failed: a person's mistake a resolver refused
    (`${run_name:...}` and an id from the environment), or OmegaConf's own message."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, UserError):
        cause = cause.__cause__ or cause.__context__
    return str(cause) if cause is not None else f"config: {error}".split("\n    full_key")[0]


def _unused(run_dir: Path) -> Path:
    """`run_dir`, or `run_dir_2`, `_3`, ... if it exists or was handed out already."""
    candidate, number = run_dir, 1
    while candidate in _handed_out or candidate.exists():
        number += 1
        candidate = run_dir.with_name(f"{run_dir.name}_{number}")
    return candidate
