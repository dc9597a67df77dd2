"""What the width-transfer runs say about each learning rate: the final validation losses by
parametrization, width, learning rate and seed; the best learning rate at each width; and a
bootstrap over seeds of where that best falls.

The bootstrap resamples the seeds with replacement, the same resample for every learning rate
and width (a seed's runs share their data order), and finds the best again in each resample.
With few seeds it is enumerated exactly (n^n resamples, 27 for 3 seeds), so the page's figures
do not depend on a random draw; beyond MOST_EXACT seeds, BOOTSTRAPS resamples are drawn.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MOST_EXACT = 5  # 5^5 = 3125 resamples; beyond, a random draw of BOOTSTRAPS
BOOTSTRAPS = 4000
LEVEL = 0.95  # the bootstrap's percentile interval

Key = tuple[str, int, int]  # (parametrization, width, log2 lr)


@dataclass(frozen=True)
class Sweep:
    """The study's final validation losses.

    Attributes:
        losses: (parametrization, width, log2 lr) -> seed -> final val/loss; a run that
            diverged, failed or has no finite loss counts as +inf (worse than any that trained).
        widths, exponents: the study's widths and log2 learning rates, in order.
        seeds: the seeds every setting has a run of (the bootstrap's units).
        missing: settings without a run of some seed in `seeds`' union (a partial study).
    """

    losses: Mapping[Key, Mapping[int, float]]
    widths: tuple[int, ...]
    exponents: tuple[int, ...]
    seeds: tuple[int, ...]
    missing: tuple[tuple[Key, int], ...]

    @classmethod
    def of(cls, runs: Mapping[tuple[str, int, int, int], Any], widths: Sequence[int],
           exponents: Sequence[int]) -> Sweep:  # fmt: skip
        """From `xfmr.Run`s keyed (parametrization, width, log2 lr, seed); a key mapped to None
        is a run not (yet) trained."""
        losses: dict[Key, dict[int, float]] = {}
        for (par, width, exponent, seed), run in runs.items():
            if run is not None:
                losses.setdefault((par, width, exponent), {})[seed] = final_loss(run)
        every = sorted({seed for *_, seed in runs})
        shared = tuple(s for s in every if all(s in by_seed for by_seed in losses.values()))
        missing = tuple(((par, w, e), s) for par, w, e, s in runs
                        if s not in losses.get((par, w, e), {}))  # fmt: skip
        return cls(losses, tuple(widths), tuple(exponents), shared, missing)

    @property
    def parametrizations(self) -> list[str]:
        return list(dict.fromkeys(par for par, _, _ in self.losses))

    def values(self, par: str, width: int, exponent: int, seeds: Sequence[int] = ()) -> list[float]:
        """The losses of `seeds` (default: the shared seeds), in order, repeats kept."""
        by_seed = self.losses[(par, width, exponent)]
        return [by_seed[s] for s in (seeds or self.seeds)]

    def mean(self, par: str, width: int, exponent: int, seeds: Sequence[int] = ()) -> float:
        values = self.values(par, width, exponent, seeds)
        return sum(values) / len(values) if values else math.nan

    def best(self, par: str, width: int, seeds: Sequence[int] = ()) -> int:
        """The log2 lr of the lowest mean loss over `seeds` (the smaller lr on a tie)."""
        return min(self.exponents, key=lambda e: self.mean(par, width, e, seeds))

    def resamples(self) -> Iterator[tuple[int, ...]]:
        """The bootstrap's resamples of the shared seeds (the module's docstring)."""
        n = len(self.seeds)
        if n <= MOST_EXACT:
            yield from itertools.product(self.seeds, repeat=n)
            return
        rng = random.Random(0)
        for _ in range(BOOTSTRAPS):
            yield tuple(rng.choices(self.seeds, k=n))

    def best_spread(self, par: str, width: int) -> Spread:
        """Where the best log2 lr falls over the resamples."""
        return Spread([self.best(par, width, seeds) for seeds in self.resamples()])

    def shift_spread(self, par: str, width: int) -> Spread:
        """The best log2 lr at `width` minus the narrowest width's, over the resamples (both
        found again in each): how far the best moves, in factors of two."""
        narrowest = self.widths[0]
        return Spread([self.best(par, width, seeds) - self.best(par, narrowest, seeds)
                       for seeds in self.resamples()])  # fmt: skip

    def regret_spread(self, par: str) -> Spread:
        """The widest width's mean loss at the narrowest width's best lr minus its mean loss at
        its own best, over the resamples, both bests found again in each."""
        narrowest, widest = self.widths[0], self.widths[-1]
        found = []
        for seeds in self.resamples():
            moved, own = self.best(par, narrowest, seeds), self.best(par, widest, seeds)
            found.append(self.mean(par, widest, moved, seeds) - self.mean(par, widest, own, seeds))
        return Spread(found)


@dataclass(frozen=True)
class Spread:
    """A statistic's values over the bootstrap's resamples."""

    found: list[float]

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        """The percentile interval: the values below which (1 - level) / 2 and (1 + level) / 2
        of the resamples fall (the lower and upper order statistics, no interpolation, so a
        discrete statistic stays on its grid)."""
        ordered = sorted(self.found)
        tail = (1 - level) / 2 * len(ordered)
        low = ordered[min(int(math.floor(tail)), len(ordered) - 1)]
        high = ordered[max(len(ordered) - 1 - int(math.floor(tail)), 0)]
        return low, high

    def share(self, value: float) -> float:
        """The share of resamples whose statistic equals `value`."""
        return sum(1 for v in self.found if v == value) / len(self.found)


def final_loss(run: Any) -> float:
    """A run's final val/loss; +inf where it failed or the loss is not finite (a diverged
    learning rate is worse than any that trained)."""
    value = run.metrics.get("val/loss")
    finite = run.status == "completed" and isinstance(value, float) and math.isfinite(value)
    return value if finite else math.inf
