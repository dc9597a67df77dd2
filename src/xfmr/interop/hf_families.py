"""The model families xfmr maps to and from Hugging Face, one per HF class.

A family names the HF class, the transformers Auto class that loads it, the xfmr model it is,
its config functions (both ways, `hf_configs`), its weight table (`hf_weights`), and `needs`:
the xfmr settings it represents exactly. A model whose settings no family represents is refused
by `unexportable`, which names what differs and the nearest settings that would export.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from xfmr.interop import hf_configs as configs
from xfmr.interop import hf_configs_llama as llama_line
from xfmr.interop.hf_weights import (
    Table,
    bert_table,
    gemma2_table,
    gpt2_table,
    llama_table,
    t5_table,
)
from xfmr.nn.config import ModelConfig, default_of
from xfmr.nn.encoder_decoder import EncoderDecoder
from xfmr.nn.heads import (
    EncoderMaskedLM,
    EncoderNextSentence,
    EncoderPretraining,
    SequenceClassification,
    SpanExtraction,
    TokenClassification,
)
from xfmr.nn.model_keys import exporting_keys
from xfmr.nn.models import CausalLM

_PLAIN = ("gelu", "gelu_tanh", "relu")  # BERT's and GPT-2's `hidden_act` / `activation_function`
_ABSOLUTE = {"attn_scale": (True,), "embed_scale": (False,)}
GPT2_NEEDS = {
    "pos.name": ("learned",),
    "norm": ("layernorm",),
    "placement": ("pre",),
    "activation": _PLAIN,
    "embed_norm": (False,),
    **_ABSOLUTE,
}
LLAMA_NEEDS = {
    "n_kv_heads": (None, "model.n_kv_heads"),  # any (None or the model's own): num_key_value_heads
    "pos.name": ("rotary",),
    "norm": ("rmsnorm",),
    "placement": ("pre",),
    "activation": tuple(llama_line.LLAMA_ACTIVATIONS.values()),
    "embed_norm": (False,),
    **_ABSOLUTE,
}
# Mistral: every layer windowed (sliding_window), or none; no biases.
MISTRAL_NEEDS = {**LLAMA_NEEDS, "bias": (False,), "window": (None, "model.window")}
# Qwen3: q_norm and k_norm always; the windowed layers are listed (layer_types).
QWEN3_NEEDS = {
    **LLAMA_NEEDS,
    "bias": (False,),
    "qk_norm": ("rmsnorm",),
    "window": (None, "model.window"),
    "global_every": (None, "model.global_every"),
}
# Gemma 2: four norms a layer, scaled embeddings, soft-caps (None: off), windows by layer.
GEMMA2_NEEDS = {
    **LLAMA_NEEDS,
    "placement": ("sandwich",),
    "embed_scale": (True,),
    "bias": (False,),
    "window": (None, "model.window"),
    "global_every": (None, "model.global_every"),
    "attn_softcap": (None, "model.attn_softcap"),
    "logit_softcap": (None, "model.logit_softcap"),
}
BERT_NEEDS = {
    "pos.name": ("learned",),
    "norm": ("layernorm",),
    "placement": ("post",),
    "activation": _PLAIN,
    "embed_norm": (True,),
    **_ABSOLUTE,
}
BERT_LM_NEEDS = {**BERT_NEEDS, "tie_embeddings": (True,)}  # BERT's MLM decoder is the embedding
T5_NEEDS = {
    "pos.name": ("relative",),
    "norm": ("rmsnorm",),
    "placement": ("pre",),
    "activation": tuple(sorted(set(configs.T5_FEED_FORWARD.values()))),
    "bias": (False,),
    "attn_scale": (False,),
    "embed_norm": (False,),
    "embed_scale": (False,),
    "share_embeddings": (True,),
    "type_vocab_size": (0,),
    # T5 v1 ties the head and scales the output; v1.1 does neither (transformers reads both
    # from `tie_word_embeddings`).
    "scale_logits": ("model.tie_embeddings",),
}


@dataclass(frozen=True)
class Family:
    """One HF class xfmr maps, both ways.

    Args:
        hf_class: the transformers class, e.g. "GPT2LMHeadModel".
        auto_class: the transformers Auto class that loads it from a folder.
        model: the xfmr model class it is.
        config: HF config -> ModelConfig (import).
        hf_config: ModelConfig -> HF config fields (export).
        table: ModelConfig -> the weight table, read both ways.
        needs: setting -> the values of it this class represents exactly; "model.X" means
            "equal to the model's X".
        pipeline: the transformers pipeline task that runs it, if any.
        build: ModelConfig and HF config -> the xfmr model (None: `model(config)`).
    """

    hf_class: str
    auto_class: str
    model: type[nn.Module]
    config: Callable[[Any], ModelConfig]
    hf_config: Callable[[ModelConfig], dict[str, Any]]
    table: Callable[[ModelConfig], Table]
    needs: dict[str, tuple] = field(default_factory=dict)
    pipeline: str | None = None
    build: Callable[[ModelConfig, Any], nn.Module] | None = None

    def new_model(self, config: ModelConfig, hf_config: Any) -> nn.Module:
        return self.build(config, hf_config) if self.build else self.model(config)

    def differences(self, config: ModelConfig) -> list[str]:
        """`key=value` of each setting of `config` that this class cannot represent."""
        return [f"{key}={value!r}" for key, value, _ in self._unmet(config)]

    def nearest(self, config: ModelConfig) -> str:
        """The settings that would make `config` export as this class."""
        changes = []
        for key, _, allowed in self._unmet(config):
            shown = allowed[0] if len(allowed) == 1 else "|".join(map(str, allowed))
            changes.append(f"{_override(key)}={_yaml(shown)}")
        return " ".join(changes)

    def _unmet(self, config: ModelConfig) -> list[tuple[str, Any, tuple]]:
        """(key, value, the values this class represents) for each key it cannot represent.
        A key the class does not list exports at any value if the field says so
        (`Key.exports`), else at its default only: a key added to ModelConfig is refused by
        every family until one lists what it maps to."""
        values, exporting = config.flat(), exporting_keys()
        unmet = []
        for key in [*self.needs, *(k for k in values if k not in self.needs)]:  # listed first
            value = values[key]
            if key in self.needs:
                allowed = tuple(values[a[6:]] if _is_ref(a) else a for a in self.needs[key])
            elif key in exporting or not config.reads(key):
                continue
            else:
                allowed = (default_of(key),)
            if value not in allowed:
                unmet.append((key, value, allowed))
        return unmet


def _is_ref(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("model.")


def _override(key: str) -> str:
    """The command-line key that sets `key`: positions are a config group (pos=rotary)."""
    return "pos" if key == "pos.name" else f"model.{key}"


def _yaml(value: Any) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _bert(head: str) -> Callable[[ModelConfig], Table]:
    return lambda config: bert_table(config, head)


def _labels(hf_config: Any) -> int:
    return int(hf_config.num_labels)


BERT_CLASSES = {
    "BertForPreTraining": ("AutoModelForPreTraining", EncoderPretraining, "pretraining", None),
    "BertForMaskedLM": ("AutoModelForMaskedLM", EncoderMaskedLM, "masked_lm", "fill-mask"),
    "BertForNextSentencePrediction": (
        "AutoModelForNextSentencePrediction",
        EncoderNextSentence,
        "next_sentence",
        None,
    ),
    "BertForSequenceClassification": (
        "AutoModelForSequenceClassification",
        SequenceClassification,
        "classification",
        "text-classification",
    ),
    "BertForTokenClassification": (
        "AutoModelForTokenClassification",
        TokenClassification,
        "tagging",
        "token-classification",
    ),
    "BertForQuestionAnswering": (
        "AutoModelForQuestionAnswering",
        SpanExtraction,
        "qa",
        "question-answering",
    ),
}
_BERT_BUILDS: dict[str, Callable[[ModelConfig, Any], nn.Module]] = {
    "classification": lambda c, hf: SequenceClassification(c, n_classes=_labels(hf)),
    "tagging": lambda c, hf: TokenClassification(c, n_labels=_labels(hf)),
}

# HF class (a checkpoint's `architectures[0]`) -> family.
FAMILIES: dict[str, Family] = {
    "GPT2LMHeadModel": Family(
        "GPT2LMHeadModel",
        "AutoModelForCausalLM",
        CausalLM,
        configs.gpt2_config,
        configs.gpt2_hf_config,
        gpt2_table,
        GPT2_NEEDS,
        "text-generation",
    ),
    # The Llama line, in the order a model is offered to them: the first that carries it exactly
    # is its class (a windowed Llama is a Mistral).
    **{
        hf_class: Family(
            hf_class,
            "AutoModelForCausalLM",
            CausalLM,
            config,
            hf_config,
            table,
            needs,
            "text-generation",
        )
        for hf_class, config, hf_config, table, needs in [
            (
                "LlamaForCausalLM",
                llama_line.llama_config,
                llama_line.llama_hf_config,
                llama_table,
                LLAMA_NEEDS,
            ),
            (
                "MistralForCausalLM",
                llama_line.mistral_config,
                llama_line.mistral_hf_config,
                llama_table,
                MISTRAL_NEEDS,
            ),
            (
                "Qwen3ForCausalLM",
                llama_line.qwen3_config,
                llama_line.qwen3_hf_config,
                llama_table,
                QWEN3_NEEDS,
            ),
            (
                "Gemma2ForCausalLM",
                llama_line.gemma2_config,
                llama_line.gemma2_hf_config,
                gemma2_table,
                GEMMA2_NEEDS,
            ),
        ]
    },
    **{
        hf_class: Family(
            hf_class,
            auto_class,
            model,
            configs.bert_config,
            configs.bert_hf_config,
            _bert(head),
            BERT_LM_NEEDS if head in ("pretraining", "masked_lm") else BERT_NEEDS,
            pipeline,
            _BERT_BUILDS.get(head),
        )
        for hf_class, (auto_class, model, head, pipeline) in BERT_CLASSES.items()
    },
    "T5ForConditionalGeneration": Family(
        "T5ForConditionalGeneration",
        "AutoModelForSeq2SeqLM",
        EncoderDecoder,
        configs.t5_config,
        configs.t5_hf_config,
        t5_table,
        T5_NEEDS,
        "text2text-generation",
    ),
}
# HF `model_type` -> the class a checkpoint of that type loads as when it names none of ours.
DEFAULT_CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "bert": "BertForPreTraining",
    "t5": "T5ForConditionalGeneration",
}


def family_for(model_type: str) -> Family:
    """The default family of HF `model_type`; one xfmr does not map is a ValueError listing
    those it does."""
    if model_type not in DEFAULT_CLASSES:
        raise ValueError(
            f"model_type={model_type!r} is not supported: xfmr maps {sorted(DEFAULT_CLASSES)}"
        )
    return FAMILIES[DEFAULT_CLASSES[model_type]]


def family_of_config(hf_config: Any) -> Family:
    """The family of a checkpoint's config: the class it names, if xfmr maps it, else its
    model_type's default."""
    named = (getattr(hf_config, "architectures", None) or [None])[0]
    family = FAMILIES.get(named)
    if family is not None and DEFAULT_CLASSES.get(hf_config.model_type) in _same_type(family):
        return family
    return family_for(hf_config.model_type)


def model_type_of(family: Family) -> str:
    """The HF `model_type` of `family`'s class (BERT's task classes: "bert")."""
    return next(t for t, c in DEFAULT_CLASSES.items() if FAMILIES[c].config is family.config)


def _same_type(family: Family) -> list[str]:
    """The default classes of the model_type `family` belongs to."""
    return [c for c in DEFAULT_CLASSES.values() if FAMILIES[c].config is family.config]


def family_of(hf_model: nn.Module) -> Family:
    """The family of an HF model object, which must be of a class xfmr maps."""
    family = FAMILIES.get(type(hf_model).__name__)
    if family is None:
        family_for(hf_model.config.model_type)  # an unknown model_type says so first
        raise ValueError(f"from_hf takes one of {sorted(FAMILIES)}, got {type(hf_model).__name__}")
    return family


def families_of_model(model: nn.Module) -> list[Family]:
    """The families whose xfmr class `model` is (CausalLM: GPT-2 and the Llama line)."""
    return [f for f in FAMILIES.values() if type(model) is f.model]
