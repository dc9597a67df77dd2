"""What every model shares: weight initialisation and parameter counting."""

from __future__ import annotations

import math

from torch import nn

from xfmr.nn.config import ModelConfig
from xfmr.nn.mup import rescale_hidden


def init_weights(model: nn.Module, config: ModelConfig) -> None:
    """N(0, 0.02) for matrices and embeddings, zero biases; residual output projections
    scaled by 1/sqrt(2 * n_layers) so the residual stream's variance does not grow with depth (GPT-2).

    Norm gains stay at one, ALiBi and sinusoids have no parameters, and recurrent layers keep
    PyTorch's U(-1/sqrt(hidden), 1/sqrt(hidden)). A weight shared by two modules is initialised
    once per module that holds it (the last draw wins); sharing makes that harmless. Under
    parametrization=mup the hidden matrices are then scaled to std / sqrt(m) (`xfmr.nn.mup`).
    Then each submodule with an `init_weights()` method (a part of one's own, `xfmr.nn.parts`)
    calls it.
    """
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            std = config.init_std
            if name.endswith(("attn.out", "ffn.down")):  # also matches cross_attn.out
                std = config.init_std / math.sqrt(2 * config.n_layers)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=config.init_std)
    rescale_hidden(model, config)
    for module in model.modules():  # a part of the person's own may set its own afterwards
        if module is not model and callable(getattr(module, "init_weights", None)):
            module.init_weights()


class ParameterCount:
    """Mixin for nn.Modules: `num_parameters()` counts each tensor once, so tied weights once."""

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() skips duplicates
