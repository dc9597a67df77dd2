"""xfmr: a declarative, config-driven experiment framework for transformers."""

__version__ = "0.1.0"
