"""Hugging Face interop: GPT-2, BERT and T5 checkpoints as xfmr models, weight for weight.

    config_from_hf(hf_config)  -> ModelConfig        the xfmr shape of an HF config
    from_hf(hf_model)          -> xfmr model         build it and copy every weight
    load_pretrained(path)      -> xfmr model         the same from a local checkpoint directory
    load_into(model, path)     -> model              copy a checkpoint into a model already built

Each family (`hf_families`) has a config function (`hf_configs`) and a weights function
(`hf_weights`) that writes the state-dict mapping out name by name; a weight left over on either
side is an error that lists it. `transformers` is imported only inside the functions that read a
checkpoint from disk; `from_hf` needs only the model object.

Settings xfmr cannot reproduce are refused with a ValueError naming the HF field and its value.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from torch import nn

from xfmr.interop.hf_families import family_for, family_of
from xfmr.interop.hf_weights import copy_weights
from xfmr.nn.config import ModelConfig

__all__ = [
    "config_from_hf",
    "config_differences",
    "from_hf",
    "load_into",
    "load_pretrained",
]


# Fields a fine-tuning run may choose for itself: they change training, not the function.
TRAINING_ONLY = ("dropout", "attn_dropout", "init_std")


def hf_model_config(path: str | Path, **training: Any) -> ModelConfig:
    """The ModelConfig of the checkpoint in local directory `path`, with `training` (some of
    TRAINING_ONLY, e.g. a fine-tuning run's dropout) replacing the checkpoint's values."""
    unknown = sorted(set(training) - set(TRAINING_ONLY))
    if unknown:
        raise ValueError(f"{unknown} are not training-only fields; those are {list(TRAINING_ONLY)}")
    return replace(config_from_hf(_load_hf_config(path)), **training)


def config_from_hf(hf_config: Any) -> ModelConfig:
    """The ModelConfig of a transformers GPT2Config, BertConfig or T5Config.

    Raises:
        ValueError: naming the HF field and value xfmr cannot reproduce.
    """
    return family_for(hf_config.model_type).config(hf_config)


def config_differences(ours: ModelConfig, theirs: ModelConfig) -> list[tuple[str, Any, Any]]:
    """(field, ours, theirs) for every field that differs; `pos` fields as `pos.name` etc."""
    flat_ours, flat_theirs = _flatten(asdict(ours)), _flatten(asdict(theirs))
    return [
        (key, flat_ours[key], flat_theirs[key])
        for key in flat_ours
        if flat_ours[key] != flat_theirs[key]
    ]


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def from_hf(hf_model: nn.Module) -> nn.Module:
    """The xfmr model equivalent to `hf_model` (GPT2LMHeadModel, BertForPreTraining or
    T5ForConditionalGeneration), holding a float32 copy of every one of its weights.

    The result is in the same train/eval mode as `hf_model`.

    Raises:
        ValueError: an unsupported class or setting, or a weight left unmapped on either side.
    """
    family = family_of(hf_model)
    model = family.model(config_from_hf(hf_model.config))
    copy_weights(model, family.weights, hf_model)
    return model.train(hf_model.training)


def load_pretrained(path: str | Path) -> nn.Module:
    """`from_hf` of the checkpoint in local directory `path` (config.json and weights, as written
    by `save_pretrained`). Nothing is downloaded."""
    return from_hf(_load_hf_model(path, _load_hf_config(path)))


def load_into(model: nn.Module, path: str | Path) -> nn.Module:
    """Copy the checkpoint in local directory `path` into `model`, which must be the xfmr class
    `from_hf` builds for it, with a ModelConfig equal to the checkpoint's `config_from_hf`.

    Returns `model`, its weights replaced.

    Raises:
        ValueError: the wrong model class, or config fields that differ (each listed with both
            values), or a weight left unmapped on either side.
    """
    hf_config = _load_hf_config(path)
    family = family_for(hf_config.model_type)
    if not isinstance(model, family.model):
        raise ValueError(
            f"{path} holds a {family.hf_class}, which loads into {family.model.__name__}, "
            f"not {type(model).__name__}"
        )
    differences = [
        d
        for d in config_differences(model.config, config_from_hf(hf_config))
        if d[0] not in TRAINING_ONLY
    ]
    if differences:
        listed = "; ".join(
            f"{key}={ours!r} (checkpoint: {theirs!r})" for key, ours, theirs in differences
        )
        raise ValueError(f"the model's config differs from the checkpoint at {path}: {listed}")
    copy_weights(model, family.weights, _load_hf_model(path, hf_config))
    return model


def _load_hf_config(path: str | Path) -> Any:
    import transformers

    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face checkpoint directory: no config.json"
        )
    return transformers.AutoConfig.from_pretrained(path, local_files_only=True)


def _load_hf_model(path: str | Path, hf_config: Any) -> nn.Module:
    import transformers

    family = family_for(hf_config.model_type)
    auto_class = getattr(transformers, family.auto_class)
    hf_model, info = auto_class.from_pretrained(
        path, config=hf_config, local_files_only=True, output_loading_info=True
    )
    if info["missing_keys"]:
        raise ValueError(
            f"the checkpoint at {path} lacks {sorted(info['missing_keys'])}, which "
            f"{family.hf_class} needs (transformers would initialise them at random)"
        )
    return hf_model
