"""Hugging Face interop: GPT-2, the Llama line (Llama, Mistral, Qwen3, Gemma 2), BERT (each task
head) and T5 checkpoints as xfmr models, weight for weight (`xfmr.interop.hf_export` goes the
other way).

    config_from_hf(hf_config)  -> ModelConfig        the xfmr shape of an HF config
    from_hf(hf_model)          -> xfmr model         build it and copy every weight
    load_pretrained(path)      -> xfmr model         the same from a local checkpoint directory
    load_into(model, path)     -> Transfer           copy a checkpoint into a model already built

Each family (`hf_families`) has config functions (`hf_configs`, `hf_configs_llama`) and a
weight table (`hf_weights`) that writes the state-dict mapping out name by name; a weight left
over on either side is an error that lists it. `transformers` is imported only inside the
functions that read a checkpoint from disk; `from_hf` needs only the model object.

Settings xfmr cannot reproduce are refused with a ValueError naming the HF field and its value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torch import nn

from xfmr.interop.hf_families import Family, families_of_model, family_of, family_of_config
from xfmr.interop.hf_weights import Source, copy_weights, read_table
from xfmr.nn.config import ModelConfig
from xfmr.nn.model_keys import differences, resume_keys
from xfmr.run_dir.files import HF_CONFIG_FILE

__all__ = [
    "Transfer",
    "config_from_hf",
    "from_hf",
    "load_into",
    "load_pretrained",
]


# Fields a fine-tuning run may choose for itself: they change training, not the function.
TRAINING_ONLY = frozenset({"dropout", "attn_dropout", "init_std"})


def hf_model_config(path: str | Path, **training: Any) -> ModelConfig:
    """The ModelConfig of the checkpoint in local directory `path`, with `training` (some of
    TRAINING_ONLY, e.g. a fine-tuning run's dropout) replacing the checkpoint's values."""
    unknown = sorted(set(training) - set(TRAINING_ONLY))
    if unknown:
        raise ValueError(f"{unknown} are not training-only fields; those are {list(TRAINING_ONLY)}")
    return replace(config_from_hf(_load_hf_config(path)), **training)


def config_from_hf(hf_config: Any) -> ModelConfig:
    """The ModelConfig of a transformers config of a family xfmr maps (GPT2Config, LlamaConfig,
    MistralConfig, Qwen3Config, Gemma2Config, BertConfig, T5Config).

    Raises:
        ValueError: naming the HF field and value xfmr cannot reproduce.
    """
    return family_of_config(hf_config).config(hf_config)


def from_hf(hf_model: nn.Module) -> nn.Module:
    """The xfmr model equivalent to `hf_model` (one of `hf_families.FAMILIES`' classes),
    holding a float32 copy of every one of its weights.

    The result is in the same train/eval mode as `hf_model`.

    Raises:
        ValueError: an unsupported class or setting, or a weight left unmapped on either side.
    """
    family = family_of(hf_model)
    config = family.config(hf_model.config)
    model = family.new_model(config, hf_model.config)
    copy_weights(model, family.table(config), hf_model)
    return model.train(hf_model.training)


def load_pretrained(path: str | Path) -> nn.Module:
    """`from_hf` of the checkpoint in local directory `path` (config.json and weights, as written
    by `save_pretrained`). Nothing is downloaded."""
    return from_hf(_load_hf_model(path, _load_hf_config(path)))


@dataclass
class Transfer:
    """What `load_into` copied: the model's tensors it loaded, the checkpoint's it had no place
    for (another head's), and the model's the checkpoint did not have (a new head's)."""

    loaded: list[str]
    skipped: list[str]
    new: list[str]


def load_into(model: nn.Module, path: str | Path) -> Transfer:
    """Copy the checkpoint in local directory `path` into `model`, an xfmr model of its family
    (BERT: any BERT task model) with a ModelConfig equal to the checkpoint's `config_from_hf`.

    The checkpoint's class and the model's may carry different heads (BertForPreTraining into
    a token classifier): the encoder they share is copied, the checkpoint's other head is
    skipped and the model's own is left as it is, each listed in the result. A head both have
    with another shape (a classifier over other labels) is skipped and new.

    Raises:
        ValueError: a model of another family, config fields that differ (each listed with
            both values), or a weight of the shared body left unmapped.
    """
    hf_config = _load_hf_config(path)
    theirs = family_of_config(hf_config)
    ours = _family_of_model(model, theirs, path)
    differs = differences(
        model.config, theirs.config(hf_config), ignore=TRAINING_ONLY | resume_keys()
    )
    if differs:
        listed = "; ".join(
            f"{key}={ours!r} (checkpoint: {theirs!r})" for key, ours, theirs in differs
        )
        raise ValueError(f"the model's config differs from the checkpoint at {path}: {listed}")
    hf_model = _load_hf_model(path, hf_config)
    if ours is theirs:
        copy_weights(model, ours.table(model.config), hf_model)
        return Transfer(loaded=list(model.state_dict()), skipped=[], new=[])
    return _copy_shared(model, ours, hf_model)


def _family_of_model(model: nn.Module, theirs: Family, path: str | Path) -> Family:
    """`model`'s family among those of the checkpoint's model type."""
    kin = [f for f in families_of_model(model) if f.config is theirs.config]
    if not kin:
        into = sorted({f.model.__name__ for f in _kin(theirs)})
        raise ValueError(
            f"{path} holds a {theirs.hf_class}, which loads into {' or '.join(into)}, "
            f"not {type(model).__name__}"
        )
    return theirs if theirs in kin else kin[0]


def _kin(family: Family) -> list[Family]:
    from xfmr.interop.hf_families import FAMILIES

    return [f for f in FAMILIES.values() if f.config is family.config]


def _copy_shared(model: nn.Module, ours: Family, hf_model: nn.Module) -> Transfer:
    """Copy what `model` (of family `ours`) and `hf_model` (a kin class) both hold."""
    import torch

    source = Source(_prefixed_state(hf_model))
    weights = read_table(ours.table(model.config), source, partial=True)
    target = model.state_dict()
    fits = {n: w for n, w in weights.items() if n in target and w.shape == target[n].shape}
    misfits = sorted(set(weights) - set(fits))
    missing_body = [n for n in set(target) - set(weights) if n.startswith("backbone.")]
    if missing_body:
        raise ValueError(f"the checkpoint lacks the encoder weights {sorted(missing_body)}")
    with torch.no_grad():
        for name, tensor in fits.items():
            target[name].copy_(tensor)
    return Transfer(
        loaded=sorted(fits),
        skipped=sorted(set(source.leftovers()) | {f"{n} (shape)" for n in misfits}),
        new=sorted(set(target) - set(fits)),
    )


def _prefixed_state(hf_model: nn.Module) -> dict[str, Any]:
    """The state dict under the task classes' names: a bare base model (BertModel) gets its
    `base_model_prefix` (`bert.`)."""
    state = hf_model.state_dict()
    if getattr(hf_model, "base_model", None) is hf_model:
        return {f"{hf_model.base_model_prefix}.{k}": v for k, v in state.items()}
    return state


def _load_hf_config(path: str | Path) -> Any:
    import transformers

    if not (Path(path) / HF_CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"{path} is not a Hugging Face checkpoint directory: no {HF_CONFIG_FILE}"
        )
    return transformers.AutoConfig.from_pretrained(path, local_files_only=True)


def _load_hf_model(path: str | Path, hf_config: Any) -> nn.Module:
    import transformers

    family = family_of_config(hf_config)
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
