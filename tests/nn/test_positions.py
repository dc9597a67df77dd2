"""Positional schemes: the sinusoidal formula and its shift-is-linear property, learned and no
positions, and scheme guards; relative (T5), ALiBi and rotary positions against reference values,
their kinds, and that each makes attention depend on positions only through their offsets."""

from __future__ import annotations

import math

import pytest
import torch

from xfmr.nn.positions import (
    POSITIONS,
    AlibiPositions,
    LearnedPositions,
    NoPositions,
    RelativePositions,
    RotaryPositions,
    SinusoidalPositions,
    alibi_slopes,
    apply_rotary,
    build_positions,
    relative_position_bucket,
    sinusoidal_table,
)

LENGTH, D = 64, 16  # the absolute schemes' table
D_MODEL, N_HEADS, T = 32, 4, 10  # attention with relative, ALiBi and rotary positions
HEAD_DIM = D_MODEL // N_HEADS


# --- absolute: sinusoidal, learned, none ----------------------------------------------------------


def _freqs(d: int) -> torch.Tensor:
    """w_i = 1 / 10000^(2i/d) for i = 0 .. d/2 - 1, in float64."""
    return torch.tensor([1.0 / 10000 ** (2 * i / d) for i in range(d // 2)], dtype=torch.float64)


def _shift_matrix(k: int, d: int) -> torch.Tensor:
    """Block-diagonal M_k with PE(pos + k) = M_k PE(pos): one 2x2 rotation per frequency."""
    m = torch.zeros(d, d, dtype=torch.float64)
    for i, w in enumerate(_freqs(d).tolist()):
        c, s = math.cos(k * w), math.sin(k * w)
        # sin(a+b) = cos(b) sin(a) + sin(b) cos(a);  cos(a+b) = -sin(b) sin(a) + cos(b) cos(a)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(
            [[c, s], [-s, c]], dtype=torch.float64
        )
    return m


@pytest.mark.parametrize("d", [8, 16, 64])
def test_sinusoidal_table_matches_formula(d: int) -> None:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)) and PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    table = sinusoidal_table(LENGTH, d)
    assert table.shape == (LENGTH, d)
    angle = torch.arange(LENGTH, dtype=torch.float64)[:, None] * _freqs(d)[None, :]  # (T, d/2)
    expected = torch.empty(LENGTH, d, dtype=torch.float64)
    expected[:, 0::2] = torch.sin(angle)
    expected[:, 1::2] = torch.cos(angle)
    torch.testing.assert_close(table.double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_sinusoidal_shift_is_a_fixed_rotation(k: int) -> None:
    """PE(pos + k) = M_k PE(pos) for every pos, M_k the block-diagonal rotation from the formula."""
    table = sinusoidal_table(LENGTH, D).double()
    m_k = _shift_matrix(k, D)
    torch.testing.assert_close(table[k:], table[:-k] @ m_k.T, atol=1e-4, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_sinusoidal_shift_fits_one_linear_map_but_nonlinear_does_not(k: int) -> None:
    """One least-squares matrix maps PE(pos) to PE(pos + k); a squared target has no such map."""
    table = sinusoidal_table(LENGTH, D).double()
    x, y = table[:-k], table[k:]  # (T - k, D) each
    fit = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (D, D)
    assert (x @ fit - y).abs().max() < 1e-4
    y_sq = table[k:] ** 2
    fit_sq = torch.linalg.lstsq(x, y_sq, driver="gelsd").solution
    assert (x @ fit_sq - y_sq).abs().max() > 0.1


def test_sinusoidal_module_adds_table() -> None:
    """SinusoidalPositions adds the first T rows of the table to its input."""
    module = SinusoidalPositions(d_model=D, max_positions=LENGTH)
    x = torch.randn(2, 10, D)
    torch.testing.assert_close(module(x), x + sinusoidal_table(10, D))


def test_learned_positions_reject_too_long_sequences() -> None:
    """LearnedPositions accepts T = max_positions and raises ValueError for T > max_positions."""
    module = LearnedPositions(d_model=D, max_positions=8)
    assert module(torch.zeros(1, 8, D)).shape == (1, 8, D)
    with pytest.raises(ValueError, match="9.*max_positions=8"):
        module(torch.zeros(1, 9, D))


def test_learned_positions_need_a_table_size() -> None:
    """LearnedPositions without max_positions is a ValueError."""
    with pytest.raises(ValueError, match="max_positions"):
        LearnedPositions(d_model=D, max_positions=None)


def test_no_positions_returns_input_unchanged() -> None:
    """NoPositions is the identity."""
    x = torch.randn(2, 5, D)
    out = NoPositions(d_model=D)(x)
    assert torch.equal(out, x)


def test_build_positions_rejects_unknown_name() -> None:
    """An unknown scheme name is a ValueError naming every valid choice."""
    with pytest.raises(ValueError, match="rotaryy") as info:
        build_positions("rotaryy", d_model=D, max_positions=LENGTH)
    for name in POSITIONS:
        assert repr(name) in str(info.value)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("none", NoPositions), ("sinusoidal", SinusoidalPositions), ("learned", LearnedPositions)],
)
def test_build_positions_builds_each_scheme(name: str, cls: type) -> None:
    """build_positions maps each registered name to its class."""
    assert isinstance(build_positions(name, d_model=D, max_positions=LENGTH), cls)


# --- relative (T5), ALiBi, rotary: offsets only ---------------------------------------------------

# T5 buckets, derived by hand from the formula (relative = key position - query position):
#
# Bidirectional, num_buckets=32, max_distance=128: 16 buckets per direction, keys AFTER the
# query (relative > 0) add 16. With n = |relative| and max_exact = 16 // 2 = 8:
#   n < 8:  bucket n
#   n >= 8: 8 + floor(log(n / 8) / log(128 / 8) * (16 - 8)) = 8 + floor(8 * log_16(n / 8)), <= 15
#   n = 8:   8 + floor(8 * 0)               = 8
#   n = 15:  8 + floor(8 * log_16(1.875))   = 8 + floor(1.813) = 9
#   n = 16:  8 + floor(8 * log_16(2))       = 8 + floor(2.0)   = 10
#   n = 100: 8 + floor(8 * log_16(12.5))    = 8 + floor(7.288) = 15
#   n = 200: 8 + floor(8 * log_16(25))      = 8 + floor(9.288) = 17 -> capped at 15
BIDIRECTIONAL = {
    0: 0,
    1: 17,
    -1: 1,
    7: 23,
    -7: 7,
    8: 24,
    -8: 8,
    15: 25,
    -15: 9,
    16: 26,
    -16: 10,
    100: 31,
    -100: 15,
    200: 31,
    -200: 15,
}
# Causal: all 32 buckets for keys at or before the query; keys after it give n = 0.
# n = max(-relative, 0), max_exact = 32 // 2 = 16:
#   n < 16:  bucket n
#   n >= 16: 16 + floor(log(n / 16) / log(128 / 16) * 16) = 16 + floor(16 * log_8(n / 16)), <= 31
#   n = 16:  16 + floor(0)                   = 16
#   n = 20:  16 + floor(16 * log_8(1.25))    = 16 + floor(1.717)  = 17
#   n = 100: 16 + floor(16 * log_8(6.25))    = 16 + floor(14.10)  = 30
#   n = 200: 16 + floor(16 * log_8(12.5))    = 16 + floor(19.43)  = 35 -> capped at 31
CAUSAL = {
    0: 0,
    1: 0,
    7: 0,
    100: 0,
    -1: 1,
    -7: 7,
    -8: 8,
    -15: 15,
    -16: 16,
    -20: 17,
    -100: 30,
    -200: 31,
}


@pytest.mark.parametrize(
    ("bidirectional", "expected"), [(True, BIDIRECTIONAL), (False, CAUSAL)], ids=["bi", "causal"]
)
def test_t5_bucket_matches_hand_computed_values(bidirectional: bool, expected: dict) -> None:
    """relative_position_bucket gives the buckets derived above from the T5 formula."""
    relative = torch.tensor(list(expected))
    buckets = relative_position_bucket(relative, bidirectional=bidirectional)
    assert dict(zip(expected, buckets.tolist(), strict=True)) == expected


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_are_monotone_and_in_range(bidirectional: bool) -> None:
    """Within a direction, buckets never decrease with distance and stay in [0, num_buckets)."""
    distance = torch.arange(0, 400)
    past = relative_position_bucket(-distance, bidirectional=bidirectional)
    assert (past.diff() >= 0).all() and past.min() == 0 and past.max() <= 31
    if bidirectional:
        future = relative_position_bucket(distance, bidirectional=True)
        assert (future[1:].diff() >= 0).all() and future[1:].min() == 17 and future.max() == 31


def test_relative_bias_shape_and_lookup() -> None:
    """bias[0, h, i, j] is the embedding of bucket(j - i) for head h; shape (1, H, T, S)."""
    torch.manual_seed(0)
    scheme = RelativePositions(n_heads=N_HEADS, bidirectional=True)
    bias = scheme.attention_bias(T)
    assert bias.shape == (1, N_HEADS, T, T)
    for i, j in [(0, 0), (2, 7), (7, 2), (9, 0)]:
        bucket = relative_position_bucket(torch.tensor(j - i), bidirectional=True)
        torch.testing.assert_close(bias[0, :, i, j], scheme.embedding.weight[bucket])


def test_relative_bias_direction() -> None:
    """Bidirectional: a key 3 after differs from a key 3 before. Causal: all later keys share one."""
    torch.manual_seed(0)
    both = RelativePositions(n_heads=N_HEADS, bidirectional=True).attention_bias(T)[0]
    assert not torch.allclose(both[:, 2, 5], both[:, 5, 2])
    causal = RelativePositions(n_heads=N_HEADS, bidirectional=False).attention_bias(T)[0]
    torch.testing.assert_close(causal[:, 2, 5], causal[:, 2, 9])
    torch.testing.assert_close(causal[:, 2, 5], causal[:, 0, 0])  # bucket 0, like distance 0


def test_alibi_slopes_match_the_paper() -> None:
    """Powers of two: 2^(-8/n), 2^(-16/n), ..., 2^-8. Others: the interpolation of the paper's code."""
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(4) == [2.0**-k for k in (2, 4, 6, 8)]
    # 6 heads: the 4-head slopes, then every other 8-head slope (2^-1, 2^-3).
    assert alibi_slopes(6) == [2.0**-k for k in (2, 4, 6, 8, 1, 3)]
    # 12 heads: the 8-head slopes, then every other 16-head slope: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-k for k in (0.5, 1.5, 2.5, 3.5)]
    assert alibi_slopes(12) == pytest.approx(expected)


def test_alibi_bias_values() -> None:
    """bias[0, h, i, j] = -slope_h * |i - j|; no parameters."""
    scheme = AlibiPositions(n_heads=N_HEADS)
    bias = scheme.attention_bias(T)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    slopes = torch.tensor(alibi_slopes(N_HEADS))
    torch.testing.assert_close(bias[0], -slopes[:, None, None] * (i - j).abs().float())
    assert list(scheme.parameters()) == []


@pytest.mark.parametrize("name", ["relative", "alibi"])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("shift", [1, 5, 37])
def test_bias_depends_only_on_offsets(name: str, bidirectional: bool, shift: int) -> None:
    """The bias for positions k .. k+T-1 equals the bias for 0 .. T-1."""
    torch.manual_seed(0)
    scheme = build_positions(name, d_model=D_MODEL, n_heads=N_HEADS, bidirectional=bidirectional)
    torch.testing.assert_close(scheme.attention_bias(T, offset=shift), scheme.attention_bias(T))


def test_rotary_angles_match_formula() -> None:
    """cos/sin at position p, channel c: angle p * base^(-2 (c mod hd/2) / hd) (RoFormer eq. 15)."""
    scheme = RotaryPositions(d_model=D_MODEL, n_heads=N_HEADS, rotary_base=100.0)
    cos, sin = scheme.rotation(T, offset=3)
    assert cos.shape == sin.shape == (T, HEAD_DIM)
    for p, c in [(0, 0), (3, 1), (5, 2), (9, 5), (7, 7)]:
        angle = (p + 3) * 100.0 ** (-2 * (c % (HEAD_DIM // 2)) / HEAD_DIM)
        assert cos[p, c].item() == pytest.approx(math.cos(angle), abs=1e-5)
        assert sin[p, c].item() == pytest.approx(math.sin(angle), abs=1e-5)


def test_rotary_pairs_channels_half_split() -> None:
    """Channel 0 is rotated with channel hd/2 (GPT-NeoX / LLaMA), not with channel 1 (interleaved)."""
    scheme = RotaryPositions(d_model=D_MODEL, n_heads=N_HEADS)
    cos, sin = scheme.rotation(4)
    x = torch.zeros(1, 1, 4, HEAD_DIM)
    x[..., 0], x[..., HEAD_DIM // 2] = 1.0, 2.0  # the pair (1, 2) in channels (0, hd/2)
    y = apply_rotary(x, cos, sin)  # channel 0 has frequency 1: angle = position
    for p in range(4):
        c, s = math.cos(p), math.sin(p)
        assert y[0, 0, p, 0].item() == pytest.approx(c * 1.0 - s * 2.0, abs=1e-5)
        assert y[0, 0, p, HEAD_DIM // 2].item() == pytest.approx(s * 1.0 + c * 2.0, abs=1e-5)
    others = [k for k in range(HEAD_DIM) if k not in (0, HEAD_DIM // 2)]
    assert (y[..., others] == 0).all()


def test_rotary_preserves_norms() -> None:
    """A rotation keeps every head vector's length."""
    scheme = RotaryPositions(d_model=D_MODEL, n_heads=N_HEADS)
    x = torch.randn(2, N_HEADS, T, HEAD_DIM)
    y = apply_rotary(x, *scheme.rotation(T, offset=11))
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("shift", [1, 7, 100])
def test_rotary_scores_depend_only_on_offsets(shift: int) -> None:
    """<R(m+k) q, R(n+k) k> = <R(m) q, R(n) k>: shifting every position leaves all scores alone,
    while the rotation itself does change them (so the test has something to hold)."""
    scheme = RotaryPositions(d_model=D_MODEL, n_heads=N_HEADS)
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, N_HEADS, T, HEAD_DIM, generator=gen) for _ in range(2))

    def scores(offset: int) -> torch.Tensor:
        cos, sin = scheme.rotation(T, offset=offset)
        return apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-1, -2)

    torch.testing.assert_close(scores(shift), scores(0), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(scores(0), q @ k.transpose(-1, -2), atol=1e-2)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_absolute_positions_do_depend_on_the_shift(name: str) -> None:
    """Absolute schemes are not shift invariant (the contrast to the tests above)."""
    torch.manual_seed(0)
    scheme = build_positions(name, d_model=D_MODEL, max_positions=64)
    x = torch.zeros(1, T, D_MODEL)
    assert not torch.allclose(scheme.embed(x, offset=5), scheme.embed(x))
    torch.testing.assert_close(scheme.embed(x, offset=5)[:, :-5], scheme.embed(x)[:, 5:])


def test_learned_positions_check_offset_against_table() -> None:
    """offset + T beyond max_positions is an error naming both."""
    scheme = build_positions("learned", d_model=D_MODEL, max_positions=12)
    scheme.embed(torch.zeros(1, 10, D_MODEL), offset=2)
    with pytest.raises(ValueError, match="13.*max_positions=12"):
        scheme.embed(torch.zeros(1, 10, D_MODEL), offset=3)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("none", "absolute"),
        ("sinusoidal", "absolute"),
        ("learned", "absolute"),
        ("relative", "bias"),
        ("alibi", "bias"),
        ("rotary", "rotary"),
    ],
)
def test_each_scheme_implements_only_its_kind(name: str, kind: str) -> None:
    """`kind` says where a scheme acts, and the hooks of the other kinds are no-ops."""
    scheme = build_positions(name, d_model=D_MODEL, max_positions=64, n_heads=N_HEADS)
    assert isinstance(scheme, POSITIONS[name]) and scheme.kind == kind
    x = torch.randn(1, T, D_MODEL)
    assert (scheme.attention_bias(T) is not None) == (kind == "bias")
    assert (scheme.rotation(T) is not None) == (kind == "rotary")
    if kind != "absolute" or name == "none":
        assert scheme.embed(x) is x


def test_build_positions_passes_options() -> None:
    """build_positions hands each scheme the options it names."""
    relative = build_positions(
        "relative",
        d_model=D_MODEL,
        n_heads=N_HEADS,
        bidirectional=False,
        num_buckets=16,
        max_distance=64,
    )
    assert (relative.bidirectional, relative.num_buckets, relative.max_distance) == (False, 16, 64)
    assert relative.embedding.weight.shape == (16, N_HEADS)
    rotary = build_positions("rotary", d_model=D_MODEL, n_heads=N_HEADS, rotary_base=500.0)
    torch.testing.assert_close(rotary.inv_freq[1], torch.tensor(500.0 ** (-2 / HEAD_DIM)))
