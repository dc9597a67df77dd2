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
    seen: int = 0  # positions appended so far; more than `keys` holds under a window

    def append(
        self, keys: torch.Tensor, values: torch.Tensor, *, keep: int | None = None
    ) -> tuple[torch.Tensor, ...]:
        """Add the new tokens' (B, nh, T, hs) keys and values; returns the kept ones and the new
        (B, nh, S, hs). `keep`: hold only the last `keep` afterwards (a sliding window's)."""
        self.seen += keys.size(2)
        if self.keys is not None:
            keys = torch.cat((self.keys, keys), dim=2)
            values = torch.cat((self.values, values), dim=2)
        self.keys, self.values = keys, values
        if keep is not None and keys.size(2) > keep:
            # a copy, so that a long prompt's keys are not held alive behind a short view
            self.keys = keys[:, :, keys.size(2) - keep :].contiguous()
            self.values = values[:, :, values.size(2) - keep :].contiguous()
        return keys, values


class KVCache:
    """The keys and values of every attention layer of one stack, kept between decoding steps
    so that each step runs only the new token: its attention costs O(S) against the S cached
    keys, where rerunning the whole sequence would cost O(S^2) (and every layer's projections).

    The stack that receives it fills one `LayerCache` per block. `length` is the number of
    positions seen (columns): the next token's column, and the offset a stack adds to it. A
    layer keeps n_kv_heads heads, and a sliding-window layer only its last window - 1 positions,
    so `nbytes` grows with the sequence only in the layers that see all of it.
    """

    def __init__(self) -> None:
        self.layers: list[LayerCache] = []

    def layer(self, index: int) -> LayerCache:
        while len(self.layers) <= index:
            self.layers.append(LayerCache())
        return self.layers[index]

    @property
    def length(self) -> int:
        return self.layers[0].seen if self.layers else 0

    @property
    def nbytes(self) -> int:
        """Bytes held: every layer's self-attention keys and values (and cross ones)."""
        held = [
            t
            for layer in self.layers
            for t in (layer.keys, layer.values, layer.cross_keys, layer.cross_values)
            if t is not None
        ]
        return sum(t.numel() * t.element_size() for t in held)

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
