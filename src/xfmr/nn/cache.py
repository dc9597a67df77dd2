"""The KV cache: each self-attention layer's keys and values, kept between decoding steps."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LayerCache:
    """One layer's cached keys and values, each (B, nh, S, hs): self-attention's grow by the
    new tokens on every call; cross-attention's are the encoder's, projected once."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    cross_keys: torch.Tensor | None = None
    cross_values: torch.Tensor | None = None

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Add the new tokens' (B, nh, T, hs) keys and values; returns all of them (B, nh, S, hs)."""
        if self.keys is not None:
            keys = torch.cat((self.keys, keys), dim=2)
            values = torch.cat((self.values, values), dim=2)
        self.keys, self.values = keys, values
        return keys, values


class KVCache:
    """The keys and values of every attention layer of one stack, kept between decoding steps
    so that each step runs only the new token: its attention costs O(S) against the S cached
    keys, where rerunning the whole sequence would cost O(S^2) (and every layer's projections).

    The stack that receives it fills one `LayerCache` per block. `length` is the number of
    cached positions (columns): the next token's column, and the offset a stack adds to it.
    """

    def __init__(self) -> None:
        self.layers: list[LayerCache] = []

    def layer(self, index: int) -> LayerCache:
        while len(self.layers) <= index:
            self.layers.append(LayerCache())
        return self.layers[index]

    @property
    def length(self) -> int:
        if not self.layers or self.layers[0].keys is None:
            return 0
        return self.layers[0].keys.size(2)

    def reorder(self, index: torch.Tensor, *, cross: bool = True) -> None:
        """Keep rows `index` (B',) in that order: beam search's surviving parents, or the rows
        still decoding. `cross=False` leaves the encoder keys and values alone, which is exact
        when every row keeps the source it had (beams of one source share them)."""
        for layer in self.layers:
            if layer.keys is not None:
                layer.keys = layer.keys.index_select(0, index)
                layer.values = layer.values.index_select(0, index)
            if cross and layer.cross_keys is not None:
                layer.cross_keys = layer.cross_keys.index_select(0, index)
                layer.cross_values = layer.cross_values.index_select(0, index)
