"""The composed config read once into a `RunConfig`: each section by its own checks, then what
the sections ask of each other, in order, then what the run chooses itself (precision, the
warm-up, loader workers). Every refusal is one UserError naming the key, the value and what
would be valid, and, where the person did not type the value, which config file set it. Nothing
here imports torch, but on a GPU machine to ask the device; the files a run needs (data, a
checkpoint, `init_from`) are checked here, before anything is printed or built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from xfmr.config.origins import Origins
from xfmr.config.run import RunConfig
from xfmr.config.trainer import TrainerConfig
from xfmr.data.config import auto_workers
from xfmr.devices import cpu_cores, cuda_available, cuda_device_count, device_count
from xfmr.errors import UserError
from xfmr.keys import unknown_key
from xfmr.nn.checks import check_lengths, check_parts
from xfmr.objectives.registry import objectives
from xfmr.parts.sources import check_ckpt_path, check_init_model, check_resume, init_source
from xfmr.ranges import SEED, check_numbers
from xfmr.text.tokenizers import WORD_MARKING_KINDS

SECTIONS = ("model", "data", "tokenizer", "objective", "optim", "trainer", "paths")
_KEYS = (
    *SECTIONS, "schedule", "logger", "callbacks", "task_name", "seed", "ckpt_path",
    "init_from", "optimized_metric", "print_config", "compile", "throughput", "nonfinite",
    "finetune", "slurm", "trial", "required",
)  # fmt: skip


def run_config(values: Mapping[str, Any], origins: Origins | None = None) -> RunConfig:
    """`values` (the composed config, resolved) read and checked into a `RunConfig`."""
    try:
        return _checked(values)
    except UserError as e:
        raise UserError(origins.explain(str(e)) if origins else str(e)) from None


def _checked(values: Mapping[str, Any]) -> RunConfig:
    for key in SECTIONS:
        if values.get(key) is None:
            raise UserError(
                f"config has no `{key}` section: compose it from the {key} group or set it"
            )
    values = {k: v for k, v in values.items() if k != "hydra"}  # Hydra's own, not the run's
    for key in values:
        if key not in _KEYS:
            raise UserError(unknown_key("", key, _KEYS))
    for key, what in (values.get("required") or {}).items():
        if _select(values, key) in (None, ""):
            raise UserError(f"{key} is not set: this experiment needs {what}")
    check_numbers("", {"seed": values.get("seed")}, {"seed": ((SEED,), None)})
    config = RunConfig.from_dict(values)
    config.trainer.check_devices()
    check_across(config)
    return resolve(config)


def check_across(config: RunConfig) -> None:
    """What the sections ask of each other, in order."""
    for target in config.targets():
        target.check_exists()
    source = init_source(config.init_from)  # a missing init_from is refused here
    check_ckpt_path(config.ckpt_path)
    model = config.model
    # A Hugging Face checkpoint decides the model (`xfmr.parts.transfer`), which the run checks;
    # otherwise the config does, and an xfmr init_from must agree with it.
    if source is None or source.kind != "hf":
        config.objective.check_trains(model)
        check_parts(model)
        lengths = [("objective.max_length", config.objective.get("max_length"))]
        check_lengths(model, [*_data_lengths(config), *lengths])
        if not config.ckpt_path:
            check_resume(config.run_dir, model)
        check_init_model(config.init_from, model)
    elif model.target_params is not None:
        raise UserError(
            f"model.target_params={model.target_params} cannot size a model loaded with "
            f"init_from={config.init_from}: its checkpoint decides the size; leave "
            "model.target_params null"
        )
    config.objective.check_tokenizer(config.tokenizer.kind, WORD_MARKING_KINDS)
    objective = config.objective
    config.data.check_feeds(objective.name, objective.facts.reads, objective.data_choices())
    packing = [name for name, facts in objectives().items() if facts.packs]
    config.data.check_packing(objective.name, objective.facts.packs, packing, arch=model.arch)
    config.data.check_files()  # after the kind: the wrong data group is named before its files


def resolve(config: RunConfig) -> RunConfig:
    """The values the run chooses itself, chosen once: the precision for the device
    (`trainer.precision=auto`), a warm-up given as a share of the run, and the loader workers
    (`data.num_workers=auto`); each named in `config.resolved` with what was given."""
    trainer = config.trainer.resolved()
    trainer.check_sharding(config.model.arch)
    config.optim.check_applies(
        config.model.arch, sharded=trainer.sharded, parametrization=config.model.parametrization
    )
    config.objective.check_loss_chunk(config.model.arch, sharded=trainer.sharded)
    resolved: dict[str, Any] = {}
    if trainer.precision != config.trainer.precision:
        resolved["trainer.precision"] = config.trainer.precision
    max_steps = trainer.max_steps if trainer.max_steps > 0 else None
    schedule = config.schedule.resolved(max_steps) if config.schedule else None
    if schedule is not None and schedule.get("warmup_steps") != config.schedule.get("warmup_steps"):
        resolved["schedule.warmup_steps"] = {"warmup_ratio": schedule.get("warmup_ratio")}
    data = config.data
    if data.auto_workers:
        data = dataclasses.replace(
            data.with_settings(num_workers=_workers_for(trainer)), workers_chosen=True
        )
        resolved["data.num_workers"] = config.data.get("num_workers")
    return config.replace(resolved, trainer=trainer, schedule=schedule, data=data)


def _workers_for(trainer: TrainerConfig) -> int:
    """`data.num_workers=auto` for the device the trainer trains on (`auto_workers`)."""
    if trainer.accelerator not in ("gpu", "cuda", "auto") or not cuda_available():
        return 0
    local = device_count(trainer.devices) or cuda_device_count()
    return auto_workers("cuda", cpus=cpu_cores(), local_world_size=local)


def _data_lengths(config: RunConfig) -> list[tuple[str, int | None]]:
    return [(f"data.{key}", config.data.get(key)) for key in ("block_size", "max_length")]


def _select(values: Mapping[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
