"""Positional schemes, one class each, registered by name in POSITIONS.

Each scheme has a `kind` saying where it acts, and implements the one hook that matches it::

    absolute  `embed(x)`            adds a (T, C) signal to the token embeddings
    bias      `attention_bias(T)`   an additive (1, H, T, S) attention bias, computed once per
                                    stack per forward and shared by all of its layers
    rotary    `rotation(T)`         (cos, sin) that rotate q and k inside every attention layer

The other two hooks return their input / None, so a stack calls all three without asking
which kind it holds. A fourth, `extend(length)`, readies a scheme for sequences longer than it
was built for (`extend_positions`): only a table has anything to do. Every hook takes `offset`,
the position of the first token. Under a KV cache the T new queries attend to S >= T keys,
the last of which is the newest query (`key_length`). With left-padded rows of different
lengths, `embed` and `rotation` also take per-row `positions` (B, T); a bias needs none,
because it sees only key - query differences, and within a row those are the same whether
counted from the row's first real token or from column 0.

Adding a scheme to xfmr: one class here, registered in POSITIONS, its name in
`xfmr.nn.config.POS_NAMES`, and one YAML file in conf/pos/. A scheme of your own needs none of
that: a class and a YAML file in your --config-dir (`xfmr.nn.parts`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from xfmr.nn.config import TARGET, ModelConfig
from xfmr.nn.parts import build_part
from xfmr.nn.rope import RopeScaling, rope_frequencies

Rotation = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each (T, hd), or (B, 1, T, hd) per row


class PositionScheme(nn.Module):
    """Base class: the three hooks, each a no-op unless the scheme's kind overrides it.

    `options` names the `build_positions` arguments the scheme's constructor takes.
    """

    kind: ClassVar[str]
    options: ClassVar[tuple[str, ...]]

    def embed(
        self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """absolute: the embeddings `x` (B, T, C) with the positional signal added."""
        return x

    def attention_bias(
        self, length: int, *, offset: int = 0, key_length: int | None = None
    ) -> torch.Tensor | None:
        """bias: the additive attention bias, (1, H, T, S)."""
        return None

    def rotation(
        self, length: int, *, offset: int = 0, positions: torch.Tensor | None = None
    ) -> Rotation | None:
        """rotary: (cos, sin), which rotate q and k in every attention layer."""
        return None

    def extend(self, length: int) -> None:
        """Make room for `length` positions. Nothing to do for a scheme computed from positions
        or distances at every forward; a table overrides it."""


def extend_positions(model: nn.Module, length: int) -> None:
    """Ready every positional scheme of `model` for sequences of `length` tokens, without
    touching a trained weight: a sinusoid table grows (its first rows unchanged), a learned
    table cannot and raises ValueError."""
    for module in model.modules():
        if isinstance(module, PositionScheme):
            module.extend(length)


def _key_positions(
    length: int, offset: int, key_length: int | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Query positions offset .. offset+T-1 and the S key positions that end at the last query
    (S = T without a cache), each 1-D."""
    end = offset + length
    start = end - (length if key_length is None else key_length)
    return torch.arange(offset, end, device=device), torch.arange(start, end, device=device)


# --- absolute: added to the embeddings -------------------------------------------------------


class NoPositions(PositionScheme):
    """No positional signal: attention alone is then permutation equivariant."""

    kind = "absolute"
    options = ("d_model", "max_positions")
    max_positions: int | None = None

    def __init__(self, *, d_model: int, max_positions: int | None = None) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, sec. 3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]  # (T, 1)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


class SinusoidalPositions(PositionScheme):
    """Fixed sinusoids times `scale`; any length up to `max_positions` (a table size, not a
    learned limit). `ModelConfig.sinusoid_scale` says which scale a model uses, and why."""

    kind = "absolute"
    options = ("d_model", "max_positions", "sinusoid_scale")

    def __init__(
        self, *, d_model: int, max_positions: int | None = None, sinusoid_scale: float = 1.0
    ) -> None:
        super().__init__()
        self.max_positions = max_positions or 8192
        self.scale = sinusoid_scale
        table = sinusoidal_table(self.max_positions, d_model) * sinusoid_scale
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        end = offset + x.size(1)
        if end > self.max_positions:
            raise ValueError(
                f"sequence length {end} exceeds the sinusoid table's pos.max_positions="
                f"{self.max_positions}: extend_positions(model, {end}) grows it"
            )
        return x + self.table[offset:end].to(x.dtype)

    def embed(
        self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        if positions is None:
            return self(x, offset)
        _check_table(positions, self.max_positions)
        return x + self.table[positions].to(x.dtype)  # (B, T, C)

    def extend(self, length: int) -> None:
        """Grow the table to `length` rows by the same formula; the rows it had are kept as
        they were, bit for bit."""
        if length <= self.max_positions:
            return
        more = sinusoidal_table(length, self.table.size(1))[self.max_positions :] * self.scale
        self.table = torch.cat((self.table, more.to(self.table.device, self.table.dtype)))
        self.max_positions = length


class LearnedPositions(PositionScheme):
    """A learned embedding per position (GPT, BERT); sequences longer than the table fail."""

    kind = "absolute"
    options = ("d_model", "max_positions")

    def __init__(self, *, d_model: int, max_positions: int | None = None) -> None:
        super().__init__()
        if not max_positions:
            raise ValueError("learned positions need pos.max_positions >= 1")
        self.max_positions = max_positions
        self.embedding = nn.Embedding(max_positions, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        end = offset + x.size(1)
        if end > self.max_positions:
            raise ValueError(
                f"sequence length {end} exceeds pos.max_positions={self.max_positions}"
            )
        return x + self.embedding.weight[offset:end]

    def embed(
        self, x: torch.Tensor, *, offset: int = 0, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        if positions is None:
            return self(x, offset)
        _check_table(positions, self.max_positions)
        return x + self.embedding(positions)  # (B, T, C)

    def extend(self, length: int) -> None:
        """A learned table has no rows past its end to give."""
        if length > self.max_positions:
            raise ValueError(
                f"{length} positions exceed the {self.max_positions} learned positions "
                f"(pos.max_positions); pos=learned cannot go past its table"
            )


def _check_table(positions: torch.Tensor, max_positions: int) -> None:
    if positions.numel() and int(positions.max()) >= max_positions:
        raise ValueError(
            f"position {int(positions.max())} exceeds pos.max_positions={max_positions}"
        )


# --- bias: added to the attention scores -----------------------------------------------------


def relative_position_bucket(
    relative_position: torch.Tensor,
    *,
    bidirectional: bool,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> torch.Tensor:
    """T5's bucket for `relative_position = key_position - query_position` (Raffel et al. 2020,
    sec. 2.1; Mesh TensorFlow `_relative_position_bucket`, reproduced operation for operation).

    Bidirectional: half the buckets for keys after the query, half for keys at or before it.
    Causal: every bucket for keys at or before the query; keys after it all fall in bucket 0
    (the causal mask hides them anyway). Within a direction, distances below `max_exact` (half
    that direction's buckets) each get their own bucket; larger ones are log-spaced up to
    `max_distance`, and everything beyond shares the last bucket.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    # float32 throughout, as in T5: the log can land just below an integer at exact powers.
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(distance < max_exact, distance, large)


class RelativePositions(PositionScheme):
    """T5 relative position bias: one learned scalar per (bucket, head) (Raffel et al. 2020).

    Bidirectional in an encoder, causal in a decoder; cross-attention gets none.
    """

    kind = "bias"
    options = ("n_heads", "bidirectional", "num_buckets", "max_distance")

    def __init__(
        self, *, n_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
    ) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.embedding = nn.Embedding(num_buckets, n_heads)  # HF T5: relative_attention_bias

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """query_positions (T,), key_positions (S,) -> bias (1, H, T, S)."""
        relative = key_positions[None, :] - query_positions[:, None]  # (T, S)
        buckets = relative_position_bucket(
            relative,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.embedding(buckets).permute(2, 0, 1).unsqueeze(0)  # (1, H, T, S)

    def attention_bias(
        self, length: int, *, offset: int = 0, key_length: int | None = None
    ) -> torch.Tensor:
        """(1, H, T, S): T queries from `offset`, S keys ending at the last query."""
        device = self.embedding.weight.device
        return self(*_key_positions(length, offset, key_length, device))


def alibi_slopes(n_heads: int) -> list[float]:
    """Per-head slopes (Press et al. 2022, sec. 3): for n a power of two the geometric sequence
    2^(-8/n), 2^(-16/n), ..., 2^(-8); otherwise the slopes for the nearest lower power of two
    followed by every other slope of the next power of two (the paper's reference code)."""
    exponent = math.floor(math.log2(n_heads))
    closest = 2**exponent
    start = 2.0 ** (-8.0 / closest)
    slopes = [start ** (i + 1) for i in range(closest)]
    if closest < n_heads:
        slopes += alibi_slopes(2 * closest)[0::2][: n_heads - closest]
    return slopes


class AlibiPositions(PositionScheme):
    """ALiBi: a fixed bias -slope_h * |i - j| per head, no parameters (Press et al. 2022).

    The paper's causal form is -slope * (i - j) for j <= i; under the causal mask that equals
    -slope * |i - j|, so one symmetric form serves encoders (as in MosaicBERT) and decoders.
    """

    kind = "bias"
    options = ("n_heads",)

    def __init__(self, *, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def forward(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """query_positions (T,), key_positions (S,) -> bias (1, H, T, S)."""
        distance = (key_positions[None, :] - query_positions[:, None]).abs()  # (T, S)
        return -self.slopes[None, :, None, None] * distance[None, None].float()  # (1, H, T, S)

    def attention_bias(
        self, length: int, *, offset: int = 0, key_length: int | None = None
    ) -> torch.Tensor:
        """(1, H, T, S): T queries from `offset`, S keys ending at the last query."""
        return self(*_key_positions(length, offset, key_length, self.slopes.device))


# --- rotary: rotates q and k -----------------------------------------------------------------


class RotaryPositions(PositionScheme):
    """RoPE (Su et al. 2021, RoFormer eq. 34): rotate each channel pair of q and k by the angle
    position * base^(-2i/head_dim), so q.k depends on positions only through their difference.

    Pairing convention: half-split, as in GPT-NeoX and HF LLaMA: channel i is paired with channel
    i + head_dim/2 (RoFormer and GPT-J pair interleaved channels 2i and 2i+1). The two are one
    fixed channel permutation of q and k apart, so equally expressive, but checkpoints need
    their q/k rows permuted to move between them.
    """

    kind = "rotary"
    options = ("d_model", "n_heads", "rotary_base", "rope_scaling")

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        rotary_base: float = 10000.0,
        rope_scaling: RopeScaling | None = None,
    ) -> None:
        super().__init__()
        head_dim = d_model // n_heads
        if head_dim % 2:
            raise ValueError(f"rotary positions need an even head dim, got {head_dim}")
        inv_freq = rope_frequencies(head_dim, rotary_base, rope_scaling)  # (hd/2,), `xfmr.nn.rope`
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> Rotation:
        """positions (T,) or (B, T) -> (cos, sin), each (..., T, head_dim), in float32."""
        angles = positions.float()[..., None] * self.inv_freq  # (..., T, hd/2)
        angles = torch.cat((angles, angles), dim=-1)  # (..., T, hd): channels i, i + hd/2 share one
        return angles.cos(), angles.sin()

    def rotation(
        self, length: int, *, offset: int = 0, positions: torch.Tensor | None = None
    ) -> Rotation:
        """(cos, sin), each (T, hd); with per-row `positions` (B, T), each (B, 1, T, hd)."""
        if positions is None:
            return self(torch.arange(offset, offset + length, device=self.inv_freq.device))
        cos, sin = self(positions)  # (B, T, hd) each
        return cos[:, None], sin[:, None]  # (B, 1, T, hd): one rotation for every head


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x_i, x_{i+d/2}) by each angle: x * cos + rotate_half(x) * sin.

    x: (B, H, T, hd); cos, sin: (T, hd) broadcast over batch and heads, or (B, 1, T, hd).
    """
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # (B, H, T, hd)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


POSITIONS: dict[str, type[PositionScheme]] = {
    "none": NoPositions,
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "relative": RelativePositions,
    "rotary": RotaryPositions,
    "alibi": AlibiPositions,
}


def build_positions(
    name: str,
    *,
    d_model: int,
    max_positions: int | None = None,
    n_heads: int = 1,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
    rotary_base: float = 10000.0,
    rope_scaling: RopeScaling | None = None,
    sinusoid_scale: float = 1.0,
) -> PositionScheme:
    """Build scheme `name`, passing it the arguments it names in its `options`.

    `bidirectional` is False for a decoder's causal self-attention (it matters to `relative`).
    """
    if name not in POSITIONS:
        raise ValueError(f"pos.name={name!r} is not one of {sorted(POSITIONS)}")
    scheme = POSITIONS[name]
    arguments = dict(
        d_model=d_model,
        max_positions=max_positions,
        n_heads=n_heads,
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
        rotary_base=rotary_base,
        rope_scaling=rope_scaling,
        sinusoid_scale=sinusoid_scale,
    )
    return scheme(**{key: arguments[key] for key in scheme.options})


def scheme_of(config: ModelConfig, *, bidirectional: bool) -> PositionScheme:
    """The config's positional scheme for one stack (causal stacks are not bidirectional)."""
    pos = config.pos
    if pos.target is None:
        return build_positions(
            pos.name,
            d_model=config.d_model,
            max_positions=pos.max_positions,
            n_heads=config.n_heads,
            bidirectional=bidirectional,
            num_buckets=pos.num_buckets,
            max_distance=pos.max_distance,
            rotary_base=pos.rotary_base,
            rope_scaling=RopeScaling.of(pos),
            sinusoid_scale=config.sinusoid_scale,
        )
    facts = dict(
        d_model=config.d_model,
        n_heads=config.n_heads,
        head_dim=config.head_dim,
        max_positions=pos.max_positions,
        bidirectional=bidirectional,
        sinusoid_scale=config.sinusoid_scale,
        init_std=config.init_std,
    )
    scheme = build_part("model.pos", {TARGET: pos.target, **pos.options}, facts)
    if not isinstance(scheme, PositionScheme):
        raise TypeError(f"model.pos._target_={pos.target} is not a PositionScheme")
    return scheme
