"""Positional schemes: the sinusoidal formula, its shift-is-linear property, and scheme guards."""

from __future__ import annotations

import math

import pytest
import torch

from xfmr.nn.positions import (
    POSITIONS,
    LearnedPositions,
    NoPositions,
    SinusoidalPositions,
    build_positions,
    sinusoidal_table,
)

LENGTH, D = 64, 16


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
