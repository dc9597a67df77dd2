"""The model families xfmr maps from Hugging Face, by HF `model_type`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from xfmr.interop.hf_configs import bert_config, gpt2_config, t5_config
from xfmr.interop.hf_weights import Source, Weights, bert_weights, gpt2_weights, t5_weights
from xfmr.nn.config import ModelConfig
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.heads import EncoderPretraining
from xfmr.nn.models import CausalLM


@dataclass(frozen=True)
class Family:
    """One supported model family: the HF class `from_hf` takes, the transformers Auto class that
    loads it from disk, the xfmr model it becomes, and its config and weight mappings."""

    hf_class: str
    auto_class: str
    model: type[nn.Module]
    config: Callable[[Any], ModelConfig]
    weights: Callable[[Source, ModelConfig], Weights]


# HF `model_type` -> family.
FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        hf_class="GPT2LMHeadModel",
        auto_class="AutoModelForCausalLM",
        model=CausalLM,
        config=gpt2_config,
        weights=gpt2_weights,
    ),
    "bert": Family(
        hf_class="BertForPreTraining",
        auto_class="AutoModelForPreTraining",
        model=EncoderPretraining,
        config=bert_config,
        weights=bert_weights,
    ),
    "t5": Family(
        hf_class="T5ForConditionalGeneration",
        auto_class="AutoModelForSeq2SeqLM",
        model=EncoderDecoder,
        config=t5_config,
        weights=t5_weights,
    ),
}


def family_for(model_type: str) -> Family:
    """The family of HF `model_type`; one xfmr does not map is a ValueError listing those it does."""
    if model_type not in FAMILIES:
        raise ValueError(
            f"model_type={model_type!r} is not supported: xfmr maps {sorted(FAMILIES)}"
        )
    return FAMILIES[model_type]


def family_of(hf_model: nn.Module) -> Family:
    """The family of an HF model object, which must be of that family's `hf_class`."""
    family = family_for(hf_model.config.model_type)
    if type(hf_model).__name__ != family.hf_class:
        supported = [f.hf_class for f in FAMILIES.values()]
        raise ValueError(f"from_hf takes one of {supported}, got {type(hf_model).__name__}")
    return family
