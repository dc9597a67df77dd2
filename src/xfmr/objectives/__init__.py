"""What a batch becomes and what the loss is."""

from xfmr.objectives.classification import ClassificationObjective
from xfmr.objectives.clm import IGNORE_INDEX, CausalLMObjective
from xfmr.objectives.mlm import MaskedLMObjective
from xfmr.objectives.seq2seq import Seq2SeqObjective
from xfmr.objectives.span_corruption import SpanCorruptionObjective

__all__ = [
    "IGNORE_INDEX",
    "ClassificationObjective",
    "CausalLMObjective",
    "MaskedLMObjective",
    "Seq2SeqObjective",
    "SpanCorruptionObjective",
]
