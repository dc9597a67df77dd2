"""What a batch becomes and what the loss is: one module per objective, each a subclass of
`contract.Objective`; `registry` finds them by config name.

Names are imported lazily so that `xfmr.objectives.registry` (what the CLI checks a config
against before anything heavy loads) does not pull in torch.
"""

from importlib import import_module

# Run directories written before objectives were named by module keep these names in their
# config.yaml; a new objective needs no entry here.
_EXPORTS = {
    "IGNORE_INDEX": "xfmr.objectives.common",
    "Objective": "xfmr.objectives.contract",
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
