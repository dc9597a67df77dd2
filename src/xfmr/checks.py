"""Composition checks run on the composed config before anything heavy is imported.

Each failure is one `UserError` naming the key, the value and what would be valid.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from xfmr.data.files import check_text_head, text_files
from xfmr.data.settings import HF_PATH_CHOICES, check_squad_windows, parallel_files
from xfmr.declared import declared
from xfmr.devices import cuda_driver_loaded
from xfmr.errors import UserError
from xfmr.nn.config import (
    EXTENDING_POSITIONS,
    POSITION_KINDS,
    TARGET,
    TRANSFORMER_ARCHS,
    ModelConfig,
    default_of,
    differences,
    fine_tune_keys,
    resume_keys,
    width_step,
)
from xfmr.objectives.registry import (
    ObjectiveFacts,
    data_choices,
    data_gives,
    objective_facts,
    objectives,
)
from xfmr.ranges import check_numbers, check_run_length
from xfmr.run_dir.files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    LAST_CHECKPOINT,
    is_sharded_checkpoint,
)
from xfmr.text.tokenizers import WORD_MARKING_KINDS, TokenizerSpec, read_tokenizer_file

_GROUPS_NEEDED = ("model", "data", "tokenizer", "objective", "optim", "trainer", "paths")


def check_config(cfg: DictConfig) -> None:
    for key in _GROUPS_NEEDED:
        if cfg.get(key) is None:
            raise UserError(
                f"config has no `{key}` section: compose it from the {key} group or set it"
            )
    check_required(cfg)
    check_numbers(cfg)
    check_init_from(cfg.get("init_from"))
    model = model_config(cfg, vocab_size=1)
    # A Hugging Face checkpoint decides the model (`xfmr.parts.transfer`), which the run checks;
    # otherwise the config does, and an xfmr init_from must agree with it.
    if not str(cfg.get("init_from") or "").startswith("hf:"):
        check_objective(cfg, model)
        check_parts(model)
        check_positions(cfg, model)
        check_resume(cfg, model)
        check_init_model(cfg, model)
    elif model.target_params is not None:
        raise UserError(
            f"model.target_params={model.target_params} cannot size a model loaded with "
            f"init_from={cfg.init_from}: its checkpoint decides the size; leave "
            "model.target_params null"
        )
    check_tokenizer(cfg)
    check_masking(cfg)
    check_data(cfg)
    check_run_length(cfg)
    # Last: on a GPU machine these may import torch to count devices or ask for bfloat16.
    check_devices(cfg)
    resolve_precision(cfg)
    check_precision(cfg)
    check_sharding(cfg, model)
    compile_mode(cfg.get("compile"))


def check_required(cfg: DictConfig) -> None:
    """Keys an experiment needs from the command line, listed as `required: {key: what to
    give}` (`key: ???` cannot do it: merging ??? over the primary config's null keeps the null)."""
    for key, what in (cfg.get("required") or {}).items():
        if OmegaConf.select(cfg, key) in (None, ""):
            raise UserError(f"{key} is not set: this experiment needs {what}")


def check_init_from(init_from: str | None) -> None:
    """Hugging Face checkpoints are read by `transformers`, an optional dependency: without it,
    say which extra installs it, before the run writes anything."""
    if str(init_from or "").startswith("hf:") and importlib.util.find_spec("transformers") is None:
        raise UserError(
            f"init_from={init_from!r} reads Hugging Face checkpoints with the transformers "
            "package, which is not installed: pip install 'xfmr[hf]' (in a checkout: "
            "pip install -e '.[hf]')"
        )


def model_config(cfg: DictConfig, *, vocab_size: int) -> ModelConfig:
    """The model's dataclass from the `model` section; its errors become UserErrors. With
    `model.target_params`, the run chooses the width once the vocabulary is known
    (`xfmr.nn.sizing`); until then the width checked is d_model rounded up to one it may
    choose, so that a d_model the run will not use is not refused."""
    model = model_section(cfg)
    if model.get("target_params") is not None and isinstance(model.get("d_model"), int):
        step = width_step(model)
        model["d_model"] = max(step, -(-model["d_model"] // step) * step)
    try:
        return ModelConfig.from_settings(model, vocab_size=vocab_size)
    except (TypeError, ValueError) as e:
        message = str(e)
        raise UserError(message if message.startswith("model.") else f"model: {message}") from None


def model_section(cfg: DictConfig) -> dict[str, Any]:
    """`model` as a plain dict. A run saved before positions moved under `model` has them in a
    `pos` section beside it, and null for the keys of other architectures: read as today's."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if "pos" not in model and cfg.get("pos") is not None:
        model["pos"] = OmegaConf.to_container(cfg.pos, resolve=True)
        model = {k: v for k, v in model.items() if v is not None or default_of(k) is None}
    return model


_DATA_FILES = ("train_source", "train_target", "val_source", "val_target", "train_path", "val_path")


def check_data(cfg: DictConfig) -> None:
    """The data gives the examples the objective reads, and its files exist."""
    data_class = _class_name(cfg.data)
    objective = _objective(cfg)
    needs = objective.reads if objective else None
    gives = data_kind(cfg.data)
    if needs and gives and needs != gives:
        choices = data_choices(needs)
        raise UserError(
            f"objective={objective.name} trains on {needs}, but the data group gives "
            f"{gives}: use data in {choices}"
            + (f" (data=hf: data.kind={needs})" if "hf" in choices else "")
        )
    if isinstance(_declared_kind(cfg.data), tuple):  # data=hf: data.path names a dataset
        if not cfg.data.get("path"):
            raise UserError(f"data.path is not set: {HF_PATH_CHOICES}")
    elif cfg.data.get("path", "absent") != "absent":
        for file in text_files(cfg.data.path):
            check_text_head(file)
    if data_class == "SquadDataModule":
        check_squad_windows(cfg.data)
    files = parallel_files(cfg.data) if data_class == "ParallelDataModule" else _DATA_FILES
    for key in files:
        path = cfg.data.get(key)
        if path is None and key in cfg.data:
            raise UserError(f"data.{key} is not set: give the file")
        if path is not None and not Path(path).is_file():
            raise UserError(f"data.{key}={str(path)!r} does not exist")
        if path is not None:
            check_text_head(Path(path), key=f"data.{key}")


def data_kind(data: DictConfig) -> str | None:
    """What the data group gives: the kind its module declares, or `data.kind` among the kinds
    it declares (data=hf)."""
    declared = _declared_kind(data)
    if not isinstance(declared, tuple):
        return declared
    if data.get("kind") not in declared:
        raise UserError(f"data.kind={data.get('kind')!r} is not valid: use one of {list(declared)}")
    return data.kind


def _declared_kind(data: DictConfig) -> str | tuple[str, ...] | None:
    return data_gives(data._target_) if data.get("_target_") else None


def _objective(cfg: DictConfig) -> ObjectiveFacts | None:
    """What the config's objective declares; None for a section with no `_target_`."""
    return objective_facts(cfg.objective._target_) if cfg.objective.get("_target_") else None


def _class_name(section: DictConfig) -> str:
    return str(section.get("_target_", "")).rsplit(".", 1)[-1]


def check_objective(cfg: DictConfig, model: ModelConfig) -> None:
    """The objective can train the architecture (no causal LM on a bidirectional encoder), with
    the segments its inputs use."""
    facts = _objective(cfg)
    if facts is None:
        return
    if model.arch not in facts.archs:
        serving = [name for name, f in objectives().items() if model.arch in f.archs]
        raise UserError(
            f"objective={facts.name} cannot train arch={model.arch}: "
            f"it needs arch in {list(facts.archs)}"
            + (
                f"; arch={model.arch} is trained by objective in {serving}"
                if serving
                else f"; no objective shipped yet trains arch={model.arch}"
            )
        )
    if model.type_vocab_size < facts.segments:
        raise UserError(
            f"objective={facts.name} puts sentences A and B in segments 0 and 1: it needs "
            f"model.type_vocab_size >= {facts.segments}, not {model.type_vocab_size} "
            f"(arch=encoder sets 2)"
        )


def check_masking(cfg: DictConfig) -> None:
    """`objective.head` is one the objective declares; whole-word masking has a tokenizer that
    marks words."""
    heads = objective.heads if (objective := _objective(cfg)) else ()
    if heads and cfg.objective.get("head", heads[0]) not in heads:
        raise UserError(f"objective.head={cfg.objective.head!r} is not one of {list(heads)}")
    kind = cfg.tokenizer.get("kind")
    if cfg.objective.get("whole_word") and kind not in (*WORD_MARKING_KINDS, "pretrained"):
        raise UserError(
            f"objective.whole_word=true needs a tokenizer whose pieces mark words, tokenizer in "
            f"{list(WORD_MARKING_KINDS)}; tokenizer={kind} marks none"
        )


def check_parts(model: ModelConfig) -> None:
    """A part of the person's own (`xfmr.nn.parts`) names a class that exists; a positional
    scheme declares a kind of scheme."""
    parts = {
        "model.pos": model.pos.target,
        "model.attention": (model.attention or {}).get(TARGET),
        "model.ffn": (model.ffn or {}).get(TARGET),
    }
    for section, target in parts.items():
        if not target:
            continue
        try:
            facts = declared(target, ("kind",))
        except (ImportError, AttributeError, ValueError):
            raise UserError(
                f"{section}._target_={target}: no such class (is its folder on PYTHONPATH?)"
            ) from None
        if section == "model.pos" and facts.get("kind") not in POSITION_KINDS:
            raise UserError(
                f"model.pos._target_={target} must subclass xfmr.nn.positions.PositionScheme "
                f"and declare kind in {list(POSITION_KINDS)}"
            )


def check_positions(cfg: DictConfig, model: ModelConfig) -> None:
    limit = model.pos.max_positions
    # Token blocks (data.block_size) or whole examples cut to a length (objective.max_length,
    # data.max_length).
    for key, length in (
        ("data.block_size", cfg.data.get("block_size")),
        ("data.max_length", cfg.data.get("max_length")),
        ("objective.max_length", cfg.objective.get("max_length")),
    ):
        too_long = length is not None and limit is not None and length > limit
        if model.pos.name == "learned" and too_long:
            raise UserError(
                f"{key}={length} is longer than model.pos.max_positions={limit} allows with pos=learned: "
                f"set model.pos.max_positions>={length}, lower {key}, or use a scheme without a limit "
                f"(pos in {list(EXTENDING_POSITIONS)})"
            )


FLOAT16_PRECISIONS = ("16", "16-mixed", "16-true")
# Lightning's precision settings (lightning.fabric.plugins.precision.precision), aliases last.
PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "16-mixed",
    "bf16-true",
    "16-true",
    "64-true",
    "transformer-engine",
    "transformer-engine-float16",
    "32",
    "bf16",
    "16",
    "64",
)


# `compile` -> torch.compile's mode; false: eager. reduce-overhead replays the step's kernels
# as CUDA graphs; max-autotune also searches kernel configurations (a long first compile).
COMPILE_MODES = {
    "false": None,
    "true": "default",
    "default": "default",
    "reduce-overhead": "reduce-overhead",
    "max-autotune": "max-autotune",
}


def compile_mode(value: Any) -> str | None:
    """torch.compile's mode for the config's `compile` (None: the step runs eagerly)."""
    key = str(value).lower() if isinstance(value, bool) or value is None else str(value)
    if key not in COMPILE_MODES and key != "none":
        raise UserError(f"compile={value!r} is not valid: use one of {list(COMPILE_MODES)}")
    return COMPILE_MODES.get(key)


AUTO_PRECISION = "auto"


def resolve_precision(cfg: DictConfig) -> str:
    """`trainer.precision=auto` (the default) becomes the precision the run's device trains
    in best: 32-true on a CPU (every CPU figure as it was), bf16-mixed on a GPU with bfloat16
    (Ampere and later), 16-mixed (float16 with loss scaling) on one without. Set in `cfg`, so
    the saved config, DDP workers and results.json name the precision chosen."""
    precision = str(cfg.trainer.get("precision"))
    if precision == AUTO_PRECISION:
        precision = device_precision(str(cfg.trainer.get("accelerator") or "auto"))
        with open_dict(cfg.trainer):
            cfg.trainer.precision = precision
    return precision


def device_precision(accelerator: str) -> str:
    """The precision `trainer.precision=auto` picks on `accelerator`."""
    if accelerator not in ("gpu", "cuda", "auto") or not cuda_driver_loaded():
        return "32-true"
    import torch  # only where a GPU may be: has it bfloat16?

    if not torch.cuda.is_available():
        return "32-true"
    return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"


def check_precision(cfg: DictConfig) -> None:
    """A precision Lightning knows, which the device can run: no float16 on a CPU (its matmuls
    run in software there, some hundred times slower than float32, where bfloat16 has fast
    kernels and float32's range), no bfloat16 on a GPU without it (before Ampere)."""
    precision = str(cfg.trainer.get("precision"))
    if precision not in PRECISIONS:
        valid = [AUTO_PRECISION, *PRECISIONS]
        raise UserError(f"trainer.precision={precision!r} is not one of {valid}")
    accelerator = str(cfg.trainer.get("accelerator"))
    if precision in FLOAT16_PRECISIONS and _runs_on_cpu(accelerator):
        raise UserError(
            f"trainer.precision={precision} on a CPU: float16 matmuls run about 100x slower than "
            "float32 there; use trainer.precision=bf16-mixed (or 32-true)"
        )
    if precision.startswith("bf16") and accelerator in ("gpu", "cuda", "auto"):
        import torch  # only for bfloat16 on a GPU, or on the auto accelerator: is there one?

        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            raise UserError(
                f"trainer.precision={precision}: this GPU ({torch.cuda.get_device_name()}) has "
                "no bfloat16; use trainer.precision=16-mixed (float16 with loss scaling) or 32-true"
            )


def _runs_on_cpu(accelerator: str) -> bool:
    if accelerator == "cpu":
        return True
    if accelerator != "auto":
        return False
    import torch  # only for a float16 run on the auto accelerator: is there a GPU?

    return not (torch.cuda.is_available() or torch.backends.mps.is_available())


DEVICES_VALID = "an integer >= 1, -1 (every device), auto, or a list of device indices"


# trainer=fsdp's strategy (`xfmr.training.sharding`), named by its `_target_`.
SHARDED_STRATEGY = "xfmr.training.sharding.ShardedStrategy"
SHARDED_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")  # what the strategy runs


def is_sharded(trainer: Any) -> bool:
    """Whether the trainer section shards the model (trainer=fsdp)."""
    strategy = trainer.get("strategy")
    return hasattr(strategy, "get") and strategy.get("_target_") == SHARDED_STRATEGY


def check_sharding(cfg: DictConfig, model: ModelConfig) -> None:
    """trainer=fsdp shards per transformer block, and its strategy takes no float16."""
    if not is_sharded(cfg.trainer):
        return
    if model.arch not in TRANSFORMER_ARCHS:
        raise UserError(
            f"trainer=fsdp shards a model per transformer block, and arch={model.arch} has none: "
            "train it with trainer=ddp or trainer=cpu"
        )
    precision = str(cfg.trainer.get("precision"))
    if precision not in SHARDED_PRECISIONS:
        raise UserError(
            f"trainer=fsdp with trainer.precision={precision}: the sharded strategy runs "
            f"{' or '.join(SHARDED_PRECISIONS)} (no float16 loss scaling); set one of them"
        )


def check_devices(cfg: DictConfig) -> None:
    """No more processes than the machine has devices: CUDA GPUs, or CPU cores for DDP on the
    CPU (more processes than cores only take turns, each slower than one process alone)."""
    devices = cfg.trainer.get("devices", "auto")
    count = device_count(devices)
    if count is None or count <= 1:
        return
    accelerator = str(cfg.trainer.get("accelerator") or "auto")
    if accelerator in ("gpu", "cuda", "auto"):
        import torch  # only for a run that asks for several devices: how many GPUs are there?

        gpus = torch.cuda.device_count()
        if gpus or accelerator != "auto":
            if count > gpus:
                raise UserError(
                    f"trainer.devices={devices} asks for {count} GPUs, but this machine has "
                    f"{gpus} CUDA device(s): use trainer.devices<={max(gpus, 1)}"
                    + ("" if gpus else " or trainer.accelerator=cpu")
                )
            return
    elif accelerator != "cpu":
        return  # tpu, mps, ...: Lightning counts them
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if count > (cores or 1):
        raise UserError(
            f"trainer.devices={devices} asks for {count} processes on the CPU, which has {cores} "
            f"core(s) here: use trainer.devices<={cores}"
        )


def device_count(devices: Any) -> int | None:
    """How many devices `trainer.devices` names; None for auto and -1 (every device)."""
    if OmegaConf.is_list(devices) or isinstance(devices, list | tuple):
        count: Any = len(devices)
    elif isinstance(devices, str) and devices != "auto":
        parts = [p for p in devices.split(",") if p.strip()]
        if not parts or not all(p.strip().lstrip("-").isdigit() for p in parts):
            raise UserError(f"trainer.devices={devices!r} is not valid: use {DEVICES_VALID}")
        count = len(parts) if "," in devices else int(devices)
    else:
        count = devices
    if devices == "auto" or count == -1:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UserError(f"trainer.devices={devices!r} is not valid: use {DEVICES_VALID}")
    return count


def check_resume(cfg: DictConfig, model: ModelConfig) -> None:
    """A run directory holding checkpoints/last.ckpt resumes it. A model that differs from the
    one saved beside it (config.yaml) is refused now, before torch loads; the run compares
    the checkpoint itself again (`xfmr.training.run.resolve_checkpoint`)."""
    if cfg.get("ckpt_path"):
        return
    try:
        run_dir = Path(str(cfg.paths.output_dir))
        saved_cfg = OmegaConf.load(run_dir / CONFIG_FILE)
        saved = model_config(saved_cfg, vocab_size=1)
    except (
        OmegaConfBaseException,
        ValueError,
        OSError,
        UserError,
    ):  # no such run: nothing to compare
        return
    last = run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
    if not last.exists():  # a file, or a folder of shards (trainer=fsdp)
        return
    differs = differences(saved, at_width_of(cfg, model, saved), ignore=resume_keys())
    if differs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(
            f"{last}, which this run would resume, was trained "
            f"with a different model ({detail}): keep the model settings to resume, or give "
            "another hydra.run.dir for a new run"
        )


def check_init_model(cfg: DictConfig, model: ModelConfig) -> None:
    """`init_from` an xfmr run (its directory, a .ckpt in it, or an xfmr-export .safetensors):
    the weights were trained as a model the config must describe, key for key, except what
    fine-tuning may change. Read without torch; a source that cannot be read is left to the run,
    which names what is missing."""
    init_from = cfg.get("init_from")
    if not init_from:
        return
    trained = _trained_model(Path(str(init_from)).expanduser())
    if trained is None:
        return
    # What a fine-tune may change (regularisation, depth, vocabulary, segments, a table's size)
    # is declared on the model's fields; every other key changes what a loaded tensor computes.
    differs = differences(trained, at_width_of(cfg, model, trained), ignore=fine_tune_keys())
    if differs:
        detail = ", ".join(f"model.{k}: trained {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(
            f"init_from={str(init_from)!r} was trained as another model ({detail}): set these "
            "as it was trained, or start without init_from"
        )


def at_width_of(cfg: DictConfig, model: ModelConfig, other: ModelConfig) -> ModelConfig:
    """`model`, whose width the run chooses (`model.target_params`), at the width `other` was
    built with: the width is not the config's to differ in. The run compares the model it
    chooses with the checkpoint again, once the vocabulary is known."""
    if model.target_params is None:
        return model
    try:
        return ModelConfig.from_settings(
            {**model_section(cfg), "d_model": other.d_model}, vocab_size=model.vocab_size
        )
    except ValueError:  # a width this config cannot take: it differs, as `model` says
        return model


def _trained_model(source: Path) -> ModelConfig | None:
    """The model an xfmr init_from source was trained as, or None."""
    try:
        if source.suffix == ".safetensors" and source.is_file():
            return ModelConfig.from_dict(_exported_model_config(source))
        whole_run = source.is_dir() and not is_sharded_checkpoint(source)
        run_dir = source if whole_run else source.parent.parent
        saved = OmegaConf.load(run_dir / CONFIG_FILE)
        return model_config(saved, vocab_size=1)
    except (OmegaConfBaseException, UserError, ValueError, TypeError, KeyError, OSError):
        return None


_SAFETENSORS_HEADER_LIMIT = 100_000_000  # the format's own limit on a header


def _exported_model_config(path: Path) -> dict[str, Any]:
    """The model config in an xfmr-export file's header: 8 bytes of length, then JSON whose
    `__metadata__.model_config` is itself JSON (the safetensors format; no torch needed)."""
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if length > _SAFETENSORS_HEADER_LIMIT:
            raise ValueError(f"a header of {length} bytes")
        header = json.loads(file.read(length))
    return json.loads(header["__metadata__"]["model_config"])


def check_tokenizer(cfg: DictConfig) -> TokenizerSpec:
    """The tokenizer settings; with kind=pretrained, a tokenizer.json that loads."""
    try:
        spec = TokenizerSpec(**OmegaConf.to_container(cfg.tokenizer, resolve=True))
        if spec.kind == "pretrained":
            read_tokenizer_file(spec.path)
        return spec
    except (TypeError, ValueError) as e:
        raise UserError(f"tokenizer: {e}") from None
