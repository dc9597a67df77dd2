"""`RunConfig`: a run's whole configuration, typed and frozen, one section per config group; the
record every layer above reads, from the command line's composition (`xfmr.config.make`) or from
a run directory's config.yaml (`RunConfig.read`), written back as config.yaml (`to_dict`).

Each section is declared and checked beside the layer that reads it (see the fields); this
module only holds them together. The attribute path of a value is its key on the command line:
`config.optim.lr` is `optim.lr=...`, `config.trainer.max_steps` is `trainer.max_steps=...`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xfmr.config import optim, options, trainer
from xfmr.config.optim import OptimConfig, ScheduleConfig
from xfmr.config.options import (
    CALLBACK_NUMBERS,
    FinetuneConfig,
    NonfiniteConfig,
    SlurmConfig,
    Targets,
    ThroughputConfig,
    compile_mode,
)
from xfmr.config.trainer import TrainerConfig
from xfmr.data import config as data_config
from xfmr.data.config import DataConfig
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives import config as objective_config
from xfmr.objectives.config import ObjectiveConfig
from xfmr.paths import config_dir
from xfmr.ranges import SEED, NumberTable
from xfmr.run_dir.files import CONFIG_FILE
from xfmr.sections import read_section
from xfmr.sweeps.trial import TrialConfig
from xfmr.targets import Target, frozen, plain
from xfmr.text import tokenizers
from xfmr.text.tokenizers import TokenizerSpec

# The top-level keys a run's config holds besides its sections.
_RUN_KEYS = (
    "task_name", "seed", "ckpt_path", "init_from", "optimized_metric", "print_config",
    "compile", "throughput", "nonfinite", "finetune", "slurm",
)  # fmt: skip


@dataclass(frozen=True)
class PathsConfig:
    """Where a run goes and what it shares (conf/paths/default.yaml): runs under `log_dir`,
    this run in `output_dir`, caches (tokenizers, token streams, measured peaks) in `cache_dir`."""

    root_dir: str
    data_dir: str
    log_dir: str
    output_dir: str
    cache_dir: str

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> PathsConfig:
        return read_section(cls, "paths", values)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir)


@dataclass(frozen=True)
class RunConfig:
    """A run's configuration. Sections: `model` (`xfmr.nn.config`), `data`
    (`xfmr.data.config`), `tokenizer` (`xfmr.text.tokenizers.TokenizerSpec`), `objective`
    (`xfmr.objectives.config`), `optim` and `schedule` (`xfmr.config.optim`), `trainer`
    (`xfmr.config.trainer`), `logger`, `callbacks` and the run's smaller sections
    (`xfmr.config.options`), `trial` (`xfmr.sweeps.trial`, in a search), `paths`.

    `resolved` names each value the run chose itself, with what was given: `trainer.precision`
    from auto, `data.num_workers` from auto, `schedule.warmup_steps` from warmup_ratio,
    `model.d_model` from target_params. The sections hold the values chosen.
    """

    model: ModelConfig
    data: DataConfig
    tokenizer: TokenizerSpec
    objective: ObjectiveConfig
    optim: OptimConfig
    schedule: ScheduleConfig | None
    trainer: TrainerConfig
    logger: Targets
    callbacks: Targets
    paths: PathsConfig
    task_name: str
    seed: int
    ckpt_path: str | None
    init_from: str | None
    optimized_metric: str | None
    print_config: bool
    compile: str | None  # torch.compile's mode; None: eager
    throughput: ThroughputConfig
    nonfinite: NonfiniteConfig
    finetune: FinetuneConfig
    slurm: SlurmConfig
    trial: TrialConfig | None = None
    required: Mapping[str, str] = field(default_factory=dict)
    resolved: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.paths.run_dir

    def targets(self) -> list[Target]:
        """Every class or function the config names to build."""
        sections = [self.data, self.objective, self.optim, self.schedule, self.trainer]
        return [
            *(s.target for s in sections if s is not None),
            *self.logger.entries.values(),
            *self.callbacks.entries.values(),
        ]

    def replace(self, resolved: Mapping[str, Any] | None = None, **sections: Any) -> RunConfig:
        """A copy with `sections` replaced (a frozen record is never changed in place); a
        value the run chose is named in `resolved`, with what was given."""
        merged = frozen({**self.resolved, **(resolved or {})})
        return dataclasses.replace(self, **sections, resolved=merged)

    def to_dict(self) -> dict[str, Any]:
        """As config.yaml holds it: the composed config's layout, with the values chosen."""
        values: dict[str, Any] = {
            "model": self.model.settings(),
            "objective": self.objective.to_dict(),
            "data": self.data.to_dict(),
            "tokenizer": self.tokenizer.to_dict(),
            "optim": self.optim.to_dict(),
            "schedule": self.schedule.to_dict() if self.schedule else None,
            "trainer": self.trainer.to_dict(),
            "logger": self.logger.to_dict(),
            "callbacks": self.callbacks.to_dict(),
            "paths": dataclasses.asdict(self.paths),
            "task_name": self.task_name,
            "seed": self.seed,
            "ckpt_path": self.ckpt_path,
            "init_from": self.init_from,
            "optimized_metric": self.optimized_metric,
            "print_config": self.print_config,
            "compile": self.compile or False,
            "throughput": dataclasses.asdict(self.throughput),
            "nonfinite": dataclasses.asdict(self.nonfinite),
            "finetune": dataclasses.asdict(self.finetune),
            "slurm": dataclasses.asdict(self.slurm),
        }
        if self.trial is not None:
            values["trial"] = self.trial.to_dict()
        if self.required:
            values["required"] = plain(self.required)
        if self.resolved:
            values["resolved"] = plain(self.resolved)
        return values

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, check_files: bool = False) -> RunConfig:
        """A run's config as written to config.yaml, by this version or an earlier one (the
        run-wide sections an earlier one did not write take conf/train.yaml's values). Its
        files are checked only with `check_files` (a finished run's data may have moved)."""
        values = {**_primary_defaults(), **values}
        schedule = values.get("schedule")
        resolved = values.get("resolved") or {}
        data = DataConfig.read(values["data"], check_files=check_files)
        return cls(
            model=read_model(values),
            data=dataclasses.replace(data, workers_chosen="data.num_workers" in resolved),
            tokenizer=_tokenizer(values["tokenizer"]),
            objective=ObjectiveConfig.read(values["objective"]),
            optim=OptimConfig.read(values["optim"]),
            schedule=ScheduleConfig.read(schedule) if schedule else None,
            trainer=TrainerConfig.read(values["trainer"]),
            logger=Targets.read("logger", values.get("logger")),
            callbacks=Targets.read("callbacks", values.get("callbacks"), CALLBACK_NUMBERS),
            paths=PathsConfig.read(values["paths"]),
            task_name=str(values["task_name"]),
            seed=int(values["seed"]),
            ckpt_path=values.get("ckpt_path"),
            init_from=values.get("init_from"),
            optimized_metric=values.get("optimized_metric"),
            print_config=bool(values["print_config"]),
            compile=compile_mode(values.get("compile")),
            throughput=ThroughputConfig.read(values.get("throughput")),
            nonfinite=NonfiniteConfig.read(values.get("nonfinite")),
            finetune=FinetuneConfig.read(values.get("finetune")),
            slurm=SlurmConfig.read(values.get("slurm")),
            trial=TrialConfig.read(values.get("trial")),
            required=frozen(values.get("required") or {}),
            resolved=frozen(resolved),
        )

    @classmethod
    def read(cls, path: str | Path) -> RunConfig:
        """The config.yaml at `path` (a run directory's), as `from_dict` reads it; a file that
        cannot be read is a UserError naming it."""
        try:
            values = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise UserError(f"{path}: not a run's {CONFIG_FILE} ({e})") from None
        if not isinstance(values, Mapping):
            raise UserError(f"{path}: not a run's {CONFIG_FILE}")
        try:
            return cls.from_dict(values)
        except (UserError, KeyError, TypeError) as e:
            raise UserError(f"{path}: {e}") from None


def read_model(values: Mapping[str, Any]) -> ModelConfig:
    """The `model` section of a config (`values`: the whole config) as configured; each
    mistake a UserError naming the key."""
    try:
        return ModelConfig.from_saved(values)
    except (TypeError, ValueError) as e:
        message = str(e)
        raise UserError(message if message.startswith("model.") else f"model: {message}") from None


def _tokenizer(values: Mapping[str, Any]) -> TokenizerSpec:
    try:
        return TokenizerSpec.read(values)
    except ValueError as e:
        message = str(e)
        raise UserError(
            message if message.startswith("tokenizer") else f"tokenizer: {message}"
        ) from None


_DEFAULTS: dict[str, Any] = {}


def _primary_defaults() -> dict[str, Any]:
    """conf/train.yaml's own run-wide values (`throughput`, `nonfinite`, ...): what a config
    written before a key existed stands for."""
    if not _DEFAULTS:
        primary = yaml.safe_load((config_dir() / "train.yaml").read_text(encoding="utf-8"))
        _DEFAULTS.update({k: v for k, v in primary.items() if k in _RUN_KEYS})
    return dict(_DEFAULTS)


def number_tables() -> dict[str, NumberTable]:
    """Every section's table of numeric keys, by the section's name (callbacks by entry)."""
    tables = {
        "": {"seed": ((SEED,), None)},
        "data": data_config.NUMBERS,
        "objective": objective_config.NUMBERS,
        "tokenizer": tokenizers.NUMBERS,
        "optim": optim.OPTIM_NUMBERS,
        "schedule": optim.SCHEDULE_NUMBERS,
        "trainer": trainer.NUMBERS,
        "throughput": options.THROUGHPUT_NUMBERS,
        "nonfinite": options.NONFINITE_NUMBERS,
        "finetune": options.FINETUNE_NUMBERS,
    }
    for name, table in CALLBACK_NUMBERS.items():
        tables[f"callbacks.{name}"] = table
    return tables
