"""Autoregressive decoding."""

from xfmr.generation.sampling import sample

__all__ = ["sample"]
