"""A model of a given number of parameters (`model.target_params`): the width that gives it.

The rule: every other key stays as given, and the width (`d_model`, with `d_ff` where that is
null) is the one whose model has the number of parameters nearest the target, among the widths
the config's checks allow (`xfmr.nn.config.width_step`). Within `TOLERANCE` of the target it is
chosen; otherwise nothing is, and the error names the two nearest sizes. The width, not the
depth: it moves the count in steps of about 2 step / d_model, fine enough for most targets,
where a layer is a step of 1 / n_layers.

Each count is the built model's own: a candidate is built on the meta device (shapes only, no
memory, no initialisation) by the function that builds the run's model, task head included,
and its parameters are counted as a run counts them (each tied tensor once). A formula would
have to follow every architecture, positional scheme, head and part of one's own; building is
exact, and takes milliseconds a width.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from xfmr.nn.config import ModelConfig, width_step

TOLERANCE = 0.02  # the widest relative gap to the target that counts as the same size
MAX_WIDTH = 1 << 17  # far past any model trained today; a target beyond it is a mistake


@dataclass(frozen=True)
class Sized:
    """The model chosen for `target` parameters: its config, its count, and whether its width
    was kept from the run being resumed."""

    config: ModelConfig
    target: int
    count: int
    kept: bool = False

    @property
    def gap(self) -> float:
        return self.count / self.target - 1

    def line(self) -> str:
        """What was chosen, in one line."""
        kept = " (kept from the run it resumes)" if self.kept else ""
        return (
            f"model.target_params={self.target}: model.d_model={self.config.d_model}{kept} "
            f"gives {self.count:,} parameters ({self.gap:+.2%})"
        )


def count_parameters(build: Callable[[ModelConfig], nn.Module], config: ModelConfig) -> int:
    """The parameters of the model `build` makes of `config`, each tensor once (tied weights
    once), counted on the meta device."""
    with torch.device("meta"):
        model = build(config)
    return sum(p.numel() for p in model.parameters())


def sized(
    settings: dict[str, Any],
    *,
    vocab_size: int,
    build: Callable[[ModelConfig], nn.Module],
    keep: int | None = None,
) -> Sized:
    """The model of the `model` section `settings` (a plain dict with `target_params`) whose
    width brings its parameters within TOLERANCE of the target. `keep`, the width of the run
    being resumed, is kept while it does. ValueError, in one line, if no width does."""
    target = int(settings["target_params"])

    def at(width: int) -> ModelConfig:
        return ModelConfig.from_settings({**settings, "d_model": width}, vocab_size=vocab_size)

    counts: dict[int, int] = {}

    def count(width: int) -> int:
        if width not in counts:
            counts[width] = count_parameters(build, at(width))
        return counts[width]

    if keep is not None and _allowed(at, keep) and abs(count(keep) / target - 1) <= TOLERANCE:
        return Sized(at(keep), target, count(keep), kept=True)
    step = width_step(settings)
    below, above = _bracket(lambda k: count(k * step), target, MAX_WIDTH // step)
    widths = sorted({k * step for k in (below, above) if k >= 1})
    best = min(widths, key=lambda w: abs(count(w) - target))
    found = Sized(at(best), target, count(best))
    if abs(found.gap) > TOLERANCE:
        raise ValueError(_nothing_near(target, step, [(w, count(w)) for w in widths]))
    return found


def _allowed(at: Callable[[int], ModelConfig], width: int) -> bool:
    try:
        at(width)
    except ValueError:
        return False
    return True


def _bracket(count: Callable[[int], int], target: int, most: int) -> tuple[int, int]:
    """(k - 1, k) for the smallest k in 1..most whose count reaches the target (counts grow with
    k); (most, most) if none does."""
    high = 1
    while count(high) < target and high < most:
        high = min(2 * high, most)
    if count(high) < target:
        return most, most
    low = high // 2  # below the target, or 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if count(middle) < target else (low, middle)
    return low, high


def _nothing_near(target: int, step: int, found: list[tuple[int, int]]) -> str:
    """Why no width serves, the nearest sizes, and what to change."""
    shown = " and ".join(f"model.d_model={w} gives {n:,} ({n / target - 1:+.1%})" for w, n in found)
    if found[0][1] > target:  # the narrowest model is already too big
        change = "raise model.target_params, or lower model.n_layers or tokenizer.vocab_size"
    elif found[-1][1] < target:  # the widest is still too small
        change = f"lower model.target_params (widths stop at {MAX_WIDTH}) or raise model.n_layers"
    else:
        finer = " (fewer model.n_heads: finer widths)" if step > 1 else ""
        change = f"set model.target_params nearer one of these, or change model.n_layers{finer}"
    multiple = f" (a multiple of {step})" if step > 1 else ""
    return (
        f"model.target_params={target}: no model.d_model{multiple} comes within "
        f"{TOLERANCE:.0%}: {shown}; {change}"
    )
