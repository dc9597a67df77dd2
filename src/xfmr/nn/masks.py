"""Attention masks: which keys each query may see, and how a mask and a positional bias fold
into the one thing SDPA takes.

Masking convention: a boolean mask is True where a query may attend to a key. An additive float
`bias` (a positional scheme's) is added to the scores. The two are folded into one float mask only
when both are present; plain causal attention with neither keeps SDPA's `is_causal` fast kernel.
"""

from __future__ import annotations

import torch


def causal_mask(
    length: int, device: torch.device | None = None, *, key_length: int | None = None
) -> torch.Tensor:
    """Boolean (T, S) mask, True where query t may attend to key s.

    With S = T (the default) that is s <= t. With S > T the queries are the last T positions of
    the S keys (a KV cache), so query t sits at key position t + S - T.
    """
    key_length = length if key_length is None else key_length
    return torch.ones(length, key_length, dtype=torch.bool, device=device).tril(key_length - length)


def window_mask(
    length: int,
    window: int,
    *,
    causal: bool,
    key_length: int | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Boolean (T, S) mask of a sliding window: True where key s is fewer than `window` positions
    from query t, and (`causal`) not after it. As in `causal_mask`, the queries are the last T of
    the S keys. Causal: the query and the window - 1 keys before it (Mistral's convention)."""
    key_length = length if key_length is None else key_length
    query = torch.arange(key_length - length, key_length, device=device)[:, None]  # (T, 1)
    distance = query - torch.arange(key_length, device=device)[None, :]  # (T, S): t - s
    near = distance.abs() < window
    return near & (distance >= 0) if causal else near


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) document ids of packed rows -> boolean (B, 1, T, T), True where query and key
    belong to the same document: a block-diagonal mask, so no example attends to another."""
    return (document_ids[:, :, None] == document_ids[:, None, :])[:, None]


def document_positions(document_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) document ids of packed rows -> (B, T) positions that restart at 0 where each
    document starts (a new id, or the row's start)."""
    columns = torch.arange(document_ids.size(1), device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    return columns - torch.where(starts, columns, 0).cummax(dim=1).values


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) with 1 for real tokens -> boolean (B, 1, 1, S) key mask."""
    return attention_mask.bool()[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """AND together boolean masks that broadcast to (B, H, T, S); None means no mask.

    A query row that would see no key at all (a padding position under left padding)
    is opened to every key: its output is ignored downstream, and SDPA would return NaN.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    mask = present[0]
    for other in present[1:]:
        mask = mask & other
    return mask | ~mask.any(dim=-1, keepdim=True)


def fold_masks(
    mask: torch.Tensor | None,
    bias: torch.Tensor | None,
    *,
    is_causal: bool,
    query_length: int,
    key_length: int,
    device: torch.device | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """What SDPA takes, `(attn_mask, is_causal)`, from a boolean mask, an additive bias and causality.

    Returns the inputs untouched when there is nothing to fold (no bias, and either no mask or no
    causality), so plain causal attention keeps `is_causal=True` and no mask. Otherwise causality
    becomes an explicit mask, and a bias with a mask becomes one float mask with -inf where the
    boolean mask is False. A stack calls this once per forward and hands the result to every layer.

    Under a KV cache (`key_length` > `query_length`) causality is always made explicit, since
    SDPA's `is_causal` aligns the queries with the first keys; a single query (the newest token)
    sees every key and needs no causal mask at all. `device` places a causal mask that neither
    `mask` nor `bias` can (both None under a cache).
    """
    if is_causal and query_length == 1:
        is_causal = False
    if bias is None and (not is_causal or (mask is None and query_length == key_length)):
        return mask, is_causal
    if is_causal:
        device = mask.device if mask is not None else bias.device if bias is not None else device
        mask = combine_masks(causal_mask(query_length, device, key_length=key_length), mask)
    elif mask is not None and mask.dtype == torch.bool:
        mask = combine_masks(mask)  # an all-padding row must not become all -inf (NaN)
    if bias is None:
        return mask, False
    if mask is None:
        return bias, False
    if mask.dtype != torch.bool:  # already a float mask: biases add
        return mask + bias, False
    return bias.masked_fill(~mask, float("-inf")), False
