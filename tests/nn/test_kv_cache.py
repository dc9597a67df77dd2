"""KV cache: decoding token by token (and in chunks) with a cache gives the logits of a full
forward pass, for a decoder and an encoder-decoder under every positional scheme, with rows of
different lengths (left-padded prompts, right-padded sources); the RNN's state does the same."""

from __future__ import annotations

import pytest
import torch

from xfmr.nn.cache import KVCache
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import build_model
from xfmr.nn.positions import POSITIONS

VOCAB = 40
ALL_POS = sorted(POSITIONS)
PROMPT_LENGTHS = [5, 2, 7]
CHUNKS = [1, 2, 1, 1, 3]  # new tokens per cached call after the prompt: single steps and chunks
TOLERANCE = dict(atol=1e-5, rtol=1e-5)

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(arch: str, pos: str, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=VOCAB,
        arch=arch,
        n_layers=2,
        n_heads=4,
        d_model=32,
        pos=PosConfig(name=pos, max_positions=32, num_buckets=8, max_distance=16),
        **overrides,
    )
    return build_model(config).eval()


def _ids(*shape: int, seed: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of different lengths -> ids (B, T) with random ids in the pads, the attention mask
    and per-row positions (each row's first real token at 0)."""
    T = max(len(row) for row in rows)
    ids = _ids(len(rows), T, seed=99)  # pads hold real-looking ids: only the mask hides them
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, T - len(row) :] = row
        mask[b, T - len(row) :] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # (B, T)
    return ids, mask, positions


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_decoder_cached_steps_match_full_forward(pos: str) -> None:
    """Left-padded prompts of lengths 5, 2 and 7, then 8 more tokens fed in chunks of 1-3 with
    the cache: every real position's logits equal the row's unpadded full forward within 1e-5."""
    model = _model("decoder", pos)
    prompts = [_ids(n, seed=n) for n in PROMPT_LENGTHS]
    continuation = _ids(len(prompts), sum(CHUNKS), seed=7)  # (B, 8)
    ids, mask, positions = _left_padded(prompts)
    cache = KVCache()
    logits = [model(ids, mask, positions=positions, cache=cache)]  # the prompt, in one call
    next_position, start = positions[:, -1:] + 1, 0
    for size in CHUNKS:
        chunk = continuation[:, start : start + size]
        mask = torch.cat([mask, torch.ones_like(chunk)], dim=1)
        chunk_positions = next_position + torch.arange(size)  # (B, size)
        logits.append(model(chunk, mask, positions=chunk_positions, cache=cache))
        next_position, start = next_position + size, start + size
    assert cache.length == ids.size(1) + sum(CHUNKS)
    cached = torch.cat(logits, dim=1)  # (B, T + 8, V)
    for b, prompt in enumerate(prompts):
        full = model(torch.cat([prompt, continuation[b]])[None])[0]  # (n + 8, V)
        torch.testing.assert_close(cached[b, -full.size(0) :], full, **TOLERANCE)


@pytest.mark.parametrize("pos", ALL_POS)
@torch.no_grad()
def test_encoder_decoder_cached_steps_match_full_forward(pos: str) -> None:
    """Right-padded sources of lengths 6, 3 and 8 encoded once; the decoder runs its 9 target
    tokens one step (or chunk) at a time with the cache, cross-attention keys projected once:
    logits equal each row's full forward on its unpadded source within 1e-5."""
    model = _model("encoder_decoder", pos, placement="post", norm="rmsnorm")
    lengths, target = [6, 3, 8], _ids(3, 1 + sum(CHUNKS), seed=5)  # (B, 9)
    source = _ids(3, max(lengths), seed=4)
    source_mask = (torch.arange(max(lengths)) < torch.tensor(lengths)[:, None]).long()
    states = model.encode(source, source_mask)
    cache, logits, start = KVCache(), [], 0
    for size in [1, *CHUNKS]:
        chunk = target[:, start : start + size]
        logits.append(model.decode(chunk, states, source_mask, cache=cache))
        start += size
    first_cross_keys = cache.layers[0].cross_keys
    assert first_cross_keys is not None and first_cross_keys.size(2) == max(lengths)
    cached = torch.cat(logits, dim=1)  # (B, 9, V)
    for b, length in enumerate(lengths):
        full = model(source[b : b + 1, :length], None, target[b : b + 1])[0]
        torch.testing.assert_close(cached[b], full, **TOLERANCE)


@torch.no_grad()
def test_reorder_moves_cached_rows_with_their_tokens() -> None:
    """After `reorder`, the cache holds the selected rows in the new order (beam search's
    parents): the next step equals the full forward of the reordered sequences."""
    model = _model("decoder", "rotary")
    ids, cache = _ids(3, 6, seed=3), KVCache()
    model(ids, cache=cache)
    order = torch.tensor([2, 0, 0])
    cache.reorder(order)
    step = _ids(3, 1, seed=8)
    cached = model(step, cache=cache)[:, -1]  # (3, V)
    full = model(torch.cat([ids[order], step], dim=1))[:, -1]
    torch.testing.assert_close(cached, full, **TOLERANCE)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@torch.no_grad()
def test_rnn_state_steps_match_full_forward(cell: str) -> None:
    """RNNLM.run: right-padded prompts packed by length, then one token at a time from the
    returned state, equal each row's full forward."""
    model = _model("rnn", "none", rnn_cell=cell)
    lengths = torch.tensor([4, 2, 6])
    prompt, steps = _ids(3, 6, seed=1), _ids(3, 3, seed=2)
    logits, state = model.run(prompt, lengths=lengths)
    last = logits[torch.arange(3), lengths - 1]  # (B, V) after each row's last real token
    for b, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(last[b], model(prompt[b : b + 1, :length])[0, -1], **TOLERANCE)
    for t in range(steps.size(1)):
        step_logits, state = model.run(steps[:, t : t + 1], state=state)
        for b, length in enumerate(lengths.tolist()):
            row = torch.cat([prompt[b, :length], steps[b, : t + 1]])[None]
            torch.testing.assert_close(step_logits[b, -1], model(row)[0, -1], **TOLERANCE)
