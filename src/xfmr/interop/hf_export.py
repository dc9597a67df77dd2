"""xfmr models -> Hugging Face models, the other direction of `xfmr.interop.hf`: the same
families (`hf_families`), config functions and weight tables, read the other way.

    hf_family(model)               -> Family        the HF class that represents it exactly
    to_hf(model, ...)              -> HF model      built offline, every weight copied

A model no HF class represents exactly is refused by `hf_family` with a ValueError naming what
differs and the nearest settings that would export, before anything is built or written.
A µP model (model.parametrization=mup) exports as the sp model with its multipliers folded into
the weights (`xfmr.nn.mup.folded`: the LM head untied from the embedding), or is refused naming
the key where no class represents that.
`transformers` is imported only by `to_hf`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from xfmr.interop.hf_families import FAMILIES, Family, families_of_model, model_type_of
from xfmr.interop.hf_weights import write_table
from xfmr.nn.heads import SequenceClassification
from xfmr.nn.mup import folded, folded_config, is_mup

# Why an architecture or model has no HF class, and what would export instead.
_NO_CLASS = {
    "rnn": (
        "transformers has no recurrent language model class",
        "arch=decoder pos=learned (GPT2LMHeadModel)",
    ),
    "EncoderLM": (
        "objective.head=linear (one tied projection, no transform) is no BERT head",
        "objective.head=bert (BertForMaskedLM)",
    ),
}
# arch=encoder_decoder with sinusoidal positions (the original Transformer): why not Marian or
# FSMT, the two HF classes with sinusoids.
SINUSOIDAL_NOTE = (
    "MarianMTModel lays its sinusoids out as [sin | cos] halves where xfmr interleaves sin and "
    "cos, and fixes LayerNorm eps at 1e-5; FSMT's use log(10000)/(d/2 - 1) frequencies and "
    "start at position padding_idx + 1"
)


def hf_family(model: nn.Module) -> Family:
    """The family whose HF class represents `model` exactly.

    Raises:
        ValueError: one line naming what differs and the nearest settings that would export.
    """
    if not is_mup(model.config):
        return _family(model, model.config)
    try:
        return _family(model, folded_config(model))
    except ValueError as e:
        raise ValueError(
            "model.parametrization=mup exports as sp with its multipliers folded into the "
            f"weights (the LM head untied from the token embedding), and then: {e}; or export "
            "a model trained with model.parametrization=sp"
        ) from None


def _family(model: nn.Module, config: Any) -> Family:
    """`hf_family` of `model` as `config` (its own, or the sp one its µP multipliers fold into)."""
    if config.arch == "rnn" or type(model).__name__ in _NO_CLASS:
        why, instead = _NO_CLASS["rnn" if config.arch == "rnn" else type(model).__name__]
        raise ValueError(
            f"{_describe(model)} cannot be exported: {why}; nearest that exports: {instead}"
        )
    candidates = families_of_model(model)
    if isinstance(model, SequenceClassification) and (
        config.arch != "encoder" or model.pooling != "first"
    ):
        raise ValueError(
            f"{_describe(model)} with objective.pooling={model.pooling!r} cannot be exported: "
            "BertForSequenceClassification pools [CLS] through its pooler, and GPT-2's and "
            "Llama's classifiers have no output bias; nearest that exports: arch=encoder "
            "objective.pooling=first"
        )
    exact = [f for f in candidates if not f.differences(config)]
    if exact:
        return exact[0]
    if not candidates:
        raise ValueError(f"{_describe(model)} cannot be exported: no Hugging Face class maps it")
    nearest = min(candidates, key=lambda f: len(f.differences(config)))
    differs = "; ".join(
        f"{f.hf_class} differs in {', '.join(f.differences(config))}" for f in candidates
    )
    note = f" ({SINUSOIDAL_NOTE})" if config.pos.name == "sinusoidal" else ""
    raise ValueError(
        f"{_describe(model)} matches no Hugging Face class exactly: {differs}{note}; "
        f"nearest that exports: {nearest.nearest(config)} ({nearest.hf_class})"
    )


def _describe(model: nn.Module) -> str:
    config = model.config
    return f"arch={config.arch} ({type(model).__name__}, pos={config.pos.name})"


def hf_config(model: nn.Module, family: Family, **extra: Any) -> Any:
    """The transformers config of `model` as `family`'s class; `extra` adds fields (special
    token ids, label names)."""
    import transformers

    fields = {**family.hf_config(folded_config(model)), **extra}
    config_class = transformers.AutoConfig.for_model(model_type_of(family)).__class__
    return config_class(architectures=[family.hf_class], **fields)


def to_hf(model: nn.Module, family: Family, **extra: Any) -> nn.Module:
    """The transformers model of `family`'s class holding `model`'s weights, in eval mode.
    Built offline from a config; nothing is downloaded."""
    import transformers

    config = hf_config(model, family, **extra)
    if isinstance(model, SequenceClassification | _token_classifier()):
        config.num_labels = _n_labels(model)
    hf_model = getattr(transformers, family.hf_class)(config)
    ours, state = folded(model)  # sp: the model's config and weights as they are
    if family.hf_class == "T5ForConditionalGeneration" and not ours.tie_embeddings:
        # transformers builds T5's head tied to `shared` whatever the config says; v1.1 has
        # its own, which save_pretrained then writes apart.
        hf_model.lm_head.weight = nn.Parameter(hf_model.lm_head.weight.detach().clone())
    table = family.table(ours)
    weights = write_table(table, state)
    target = hf_model.state_dict()
    weights |= {name: torch.zeros_like(target[name]) for name in table.zeros}
    missing = sorted(set(target) - set(weights))
    unknown = sorted(set(weights) - set(target))
    if missing or unknown:
        raise AssertionError(f"{family.hf_class} table: unset {missing}, unknown {unknown}")
    with torch.no_grad():
        for name, tensor in weights.items():
            target[name].copy_(tensor)
    return hf_model.eval()


def _token_classifier() -> type:
    from xfmr.nn.heads import TokenClassification

    return TokenClassification


def _n_labels(model: nn.Module) -> int:
    head = model.classifier if isinstance(model.classifier, nn.Linear) else model.classifier.proj
    return head.out_features


__all__ = ["FAMILIES", "SINUSOIDAL_NOTE", "hf_config", "hf_family", "to_hf"]
