"""Autoregressive decoding: greedy, beam search and sampling, with a KV cache.

Names are imported lazily so that `xfmr.generation.config` (the settings a CLI checks before
anything heavy loads) does not pull in torch.
"""

from importlib import import_module

_EXPORTS = {
    "LENGTH_PENALTY_FORMS": "xfmr.generation.config",
    "STRATEGIES": "xfmr.generation.config",
    "GenerationConfig": "xfmr.generation.config",
    "Hypothesis": "xfmr.generation.config",
    "generate": "xfmr.generation.search",
    "sample_text": "xfmr.generation.text",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'xfmr.generation' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
