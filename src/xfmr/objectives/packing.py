"""Packing (`data.packing=true`): the examples of a batch laid into as few rows as hold them.

A padded batch spends a row on every example however short; packed, several share a row, each
attending only within itself (the model's `document_ids`: a block-diagonal mask, positions that
restart at each example). Which examples share a row is first-fit decreasing over the batch's
examples, a row as wide as the batch's longest example: the batch keeps its examples (the same
sampler, the same counts, so losses and gradient accumulation are unchanged); only the padding
between them goes. An example stays whole; no example is split across rows.

An objective that packs (`Objective.packs`) calls `pack` on its padded batch with the keys of
each side: per-token keys are moved, per-example keys (a classification label) stay as they
are. `document_ids` says which example each token is (its index in the batch), -1 for padding.

A text corpus's blocks (clm, mlm) come packed from the data module instead: a block of the
stream holds the ends and starts of documents, each token's document numbered in the block
(`text_blocks`); clm leaves the target across a boundary uncounted (`CausalLMObjective`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

PADDING_DOCUMENT = -1  # the document id of a packed row's padding


def first_fit(lengths: Sequence[Sequence[int]], capacity: Sequence[int]) -> list[list[int]]:
    """Rows of example indices: each example (its length on every side) into the first row
    with room on every side, longest first (first-fit decreasing); within a row, in batch
    order."""
    order = sorted(range(len(lengths)), key=lambda i: (-sum(lengths[i]), i))
    rows: list[list[int]] = []
    used: list[list[int]] = []
    for i in order:
        for row, room in zip(rows, used, strict=True):
            if all(u + n <= c for u, n, c in zip(room, lengths[i], capacity, strict=True)):
                row.append(i)
                room[:] = [u + n for u, n in zip(room, lengths[i], strict=True)]
                break
        else:
            rows.append([i])
            used.append(list(lengths[i]))
    return [sorted(row) for row in rows]


def pack(
    batch: Mapping[str, torch.Tensor], sides: Sequence[tuple[str, str, dict[str, int]]]
) -> dict[str, torch.Tensor]:
    """`batch` with its examples packed into rows.

    sides: (mask key, document-ids key, {per-token key: its padding value}) for each sequence
        an example has (a classifier's one; a translation's source and target), all padded on
        the right; the mask key is among the per-token keys. Every side is packed by the same
        rows, so an example's source and target share their row index.
    """
    masks = [batch[mask_key] for mask_key, _, _ in sides]
    lengths = [[int(n) for n in m.sum(1).tolist()] for m in masks]
    per_example = [list(side) for side in zip(*lengths, strict=True)]
    rows = first_fit(per_example, [m.size(1) for m in masks])
    packed = dict(batch)
    for (_, documents, keys), side_lengths in zip(sides, lengths, strict=True):
        width = max(sum(side_lengths[i] for i in row) for row in rows)
        ids = torch.full((len(rows), width), PADDING_DOCUMENT, dtype=torch.long)
        for key, pad in keys.items():
            packed[key] = batch[key].new_full((len(rows), width), pad)
        for r, row in enumerate(rows):
            start = 0
            for i in row:
                n = side_lengths[i]
                for key in keys:
                    packed[key][r, start : start + n] = batch[key][i, :n]
                ids[r, start : start + n] = i
                start += n
        packed[documents] = ids
    return packed


def text_blocks(blocks: list) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A text corpus's blocks as ids (B, T + 1) and, when they come packed (`data.packing`:
    each block (ids, its tokens' documents), `xfmr.data.text.BlockDataset`), the document of
    each id (B, T + 1); else None."""
    if isinstance(blocks[0], tuple):
        ids, documents = (torch.stack(column) for column in zip(*blocks, strict=True))
        return ids, documents
    return torch.stack(blocks), None


def packed_text(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`pack` for an objective of a text corpus: its blocks come packed from the data module
    (a block is a row of whole documents and pieces of them, `document_ids` says which), so
    the collated batch is already packed."""
    if "document_ids" not in batch:
        raise RuntimeError("data.packing=true, but the text corpus's blocks carry no documents")
    return batch


class PackedCollate:
    """An objective's collate, then its `pack`: what a loader calls with `data.packing=true`
    (a class, not a closure, so that loader workers can pickle it)."""

    def __init__(self, objective) -> None:  # noqa: ANN001 (an Objective: the contract imports this)
        self.objective = objective

    def __call__(self, examples: list) -> dict[str, torch.Tensor]:
        return self.objective.pack(self.objective.collate(examples))


def padding_share(mask: torch.Tensor) -> float:
    """The share of a batch's positions that are padding (mask 0)."""
    return 1.0 - float(mask.float().mean())
