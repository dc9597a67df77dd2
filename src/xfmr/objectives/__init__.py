"""What a batch becomes and what the loss is.

Names are imported lazily so that `xfmr.objectives.archs` (the tables the CLI checks a config
against before anything heavy loads) does not pull in torch.
"""

from importlib import import_module

_EXPORTS = {
    "IGNORE_INDEX": "xfmr.objectives.common",
    "CausalLMObjective": "xfmr.objectives.clm",
    "ClassificationObjective": "xfmr.objectives.classification",
    "MaskedLMObjective": "xfmr.objectives.mlm",
    "MaskedLMNextSentenceObjective": "xfmr.objectives.nsp",
    "NextSentenceObjective": "xfmr.objectives.nsp",
    "QuestionAnsweringObjective": "xfmr.objectives.qa",
    "Seq2SeqObjective": "xfmr.objectives.seq2seq",
    "SpanCorruptionObjective": "xfmr.objectives.span_corruption",
    "TaggingObjective": "xfmr.objectives.tagging",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'xfmr.objectives' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
