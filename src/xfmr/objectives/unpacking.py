"""Packed rows read back per example (`data.packing`): where each example of a batch lies in
its row, and its per-token values back in a row of its own, as they were before packing.

`xfmr.objectives.packing.pack` numbers each token by its example's index in the batch
(`document_ids`, -1 for padding) and lays an example's tokens side by side, in order, in one
row. An objective whose targets or scores are positions (tagging's words, QA's answer span)
reads them back here, so that each example is counted and scored as it is unpacked.
"""

from __future__ import annotations

import torch


def example_places(
    document_ids: torch.Tensor, n_examples: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, starts, lengths), each (n_examples,): the row of each example of packed rows
    `document_ids` (R, T), the position of its first token there and its token count."""
    width = document_ids.size(1)
    documents = document_ids.flatten()  # (R T,)
    real = documents >= 0
    at = torch.arange(documents.numel(), device=documents.device)[real]
    first = torch.full((n_examples,), documents.numel(), device=documents.device)
    first = first.scatter_reduce(0, documents[real], at, reduce="amin")
    lengths = torch.bincount(documents[real], minlength=n_examples)
    return first // width, first % width, lengths


def unpack(
    values: torch.Tensor, document_ids: torch.Tensor, n_examples: int, fill: float
) -> torch.Tensor:
    """Per-token `values` (R, T, ...) of packed rows -> (n_examples, T, ...): each example's
    tokens from position 0 of a row of its own, `fill` after its last (no host sync: a row is
    as wide as the packed rows, which hold the longest example)."""
    rows, starts, lengths = example_places(document_ids, n_examples)
    offsets = torch.arange(values.size(1), device=values.device)  # (T,)
    inside = offsets[None, :] < lengths[:, None]  # (n, T)
    columns = (starts[:, None] + offsets[None, :]).clamp(max=values.size(1) - 1)  # (n, T)
    gathered = values[rows[:, None], columns]  # (n, T, ...)
    shape = (*inside.shape, *[1] * (values.dim() - 2))
    return gathered.masked_fill(~inside.view(shape), fill)
