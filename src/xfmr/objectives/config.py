"""The `objective` section: the objective class (`_target_`), what it declares (the
architectures it trains, the kind of examples it reads, its heads: `registry.ObjectiveFacts`)
and its settings, checked before torch loads. Nothing here imports torch.

What it needs of the others (an architecture it can train, segments for sentence pairs, a
tokenizer that marks words) is checked by `ObjectiveConfig.check_*` when the run's config is read
(`xfmr.config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.registry import (
    ObjectiveFacts,
    data_choices,
    objective_facts,
    objectives,
    shipped,
)
from xfmr.ranges import FRACTION, FRACTION_OPEN, STEPS, Number, NumberTable, check_numbers
from xfmr.targets import Target, TargetSection, parameters

NUMBERS: NumberTable = {
    "max_length": ((STEPS,), None),
    "select_rate": ((FRACTION_OPEN,), None),
    "mask_rate": ((FRACTION,), None),
    "random_rate": ((FRACTION,), None),
    "label_smoothing": ((Number(low=0, high=1, open_high=True),), None),
    "noise_density": ((FRACTION_OPEN,), None),
    "mean_span_length": ((Number(low=1),), None),
    "n_sentinels": ((STEPS,), None),
    "max_answer_length": ((STEPS,), None),
    # PaLM's z-loss weight (Chowdhery et al. 2022, sec. 5; `xfmr.objectives.common.z_loss_sum`).
    "z_loss": ((Number(low=0),), None),
    # Tokens a chunk of the head and loss (`xfmr.objectives.chunked_loss`); null: whole.
    "loss_chunk": ((STEPS,), "the logits of the whole batch at once"),
}
# The architectures whose vocabulary head `objective.loss_chunk` runs itself (a transformer
# decoder's `lm_head`: xfmr.objectives.chunked_loss).
CHUNKED_HEAD_ARCHS = ("decoder", "encoder_decoder")
# The key of the z-loss's weight, taken by the objectives with vocabulary logits.
Z_LOSS_KEY = "z_loss"
# Tokenizers whose pieces mark where words start (`xfmr.text.tokenizers`).
PRETRAINED_TOKENIZER = "pretrained"


def _check_takes_z_loss(target: Target) -> None:
    """objective.z_loss is set only for an objective that takes it (one with vocabulary logits
    and a token cross-entropy), refused otherwise naming those that do."""
    takes = parameters(target.path)
    if Z_LOSS_KEY not in target.settings or takes is None or Z_LOSS_KEY in takes:
        return
    taking = [
        name
        for name, path in shipped("objective").items()
        if Z_LOSS_KEY in (parameters(path) or ())
    ]
    raise UserError(
        f"objective.z_loss is PaLM's z-loss on vocabulary logits: objective in {taking} takes "
        f"it; objective={objective_facts(target.path).name} has no vocabulary head"
    )


@dataclass(frozen=True)
class ObjectiveConfig(TargetSection):
    """The objective and its settings.

    Args:
        target: the objective's class and its keyword arguments.
        facts: what the class declares (name, architectures, kind of examples, heads).
    """

    target: Target
    facts: ObjectiveFacts

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> ObjectiveConfig:
        target = Target.read("objective", values, check_keys=False)
        _check_takes_z_loss(target)
        target.check_keys("objective")
        check_numbers("objective", target.settings, NUMBERS)
        facts = objective_facts(target.path)
        heads = facts.heads
        if heads and target.get("head", heads[0]) not in heads:
            raise UserError(f"objective.head={target.get('head')!r} is not one of {list(heads)}")
        return cls(target, facts)

    @property
    def name(self) -> str:
        return self.facts.name

    def get(self, key: str, default: Any = None) -> Any:
        return self.target.get(key, default)

    def check_trains(self, model: ModelConfig) -> None:
        """It can train the architecture (no causal LM on a bidirectional encoder), with the
        segments its inputs use."""
        facts = self.facts
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

    def check_loss_chunk(self, arch: str, *, sharded: bool) -> None:
        """objective.loss_chunk runs a transformer decoder's own head (the `lm_head` of
        `CausalLM` or `EncoderDecoder`) in chunks, on a model whose head is whole on each
        process."""
        chunk = self.get("loss_chunk")
        if chunk is None:
            return
        if arch not in CHUNKED_HEAD_ARCHS:
            raise UserError(
                f"objective.loss_chunk={chunk} runs the output head of arch in "
                f"{list(CHUNKED_HEAD_ARCHS)} in chunks; arch={arch} keeps its own head: set "
                "objective.loss_chunk=null"
            )
        if sharded:
            raise UserError(
                f"objective.loss_chunk={chunk} with trainer=fsdp: the chunked head reads the "
                "head's weight whole, and the sharded strategy gives each process a slice; use "
                "trainer in [default, cpu, ddp], or objective.loss_chunk=null with trainer=fsdp"
            )

    def check_tokenizer(self, kind: str, word_marking: tuple[str, ...]) -> None:
        """Whole-word masking has a tokenizer whose pieces mark words."""
        if self.get("whole_word") and kind not in (*word_marking, PRETRAINED_TOKENIZER):
            raise UserError(
                f"objective.whole_word=true needs a tokenizer whose pieces mark words, tokenizer "
                f"in {list(word_marking)}; tokenizer={kind} marks none"
            )

    def data_choices(self) -> list[str]:
        """The shipped data groups that give what it reads."""
        return data_choices(self.facts.reads)

    def build(self, **given: Any) -> Any:
        return self.target.build(**given)

    def to_dict(self) -> dict[str, Any]:
        return self.target.to_dict()
