"""What a batch becomes and what the loss is."""

from xfmr.objectives.clm import IGNORE_INDEX, CausalLMObjective

__all__ = ["IGNORE_INDEX", "CausalLMObjective"]
