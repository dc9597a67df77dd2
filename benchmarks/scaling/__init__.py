"""The parts of experiment_scaling.py: what a run is to its fits (Point) and the settings every
part shares (here), and the closing section written from the numbers (words)."""

from __future__ import annotations

from dataclasses import dataclass

SCHEMES = ("learned", "rotary", "alibi")
BASELINE = "learned"
COLOURS = {pos: f"C{i}" for i, pos in enumerate(SCHEMES)}  # one colour per scheme, every figure
HEAD_DIM = 16
# (d_model, n_layers): width and depth grow together, about 100x in compute per token from the
# first to the last; five sizes, so that a law with an irreducible term (three parameters)
# leaves two degrees of freedom to test its fit with.
SIZES = ((16, 1), (32, 1), (48, 2), (64, 3), (96, 4))
QUICK_SIZES = ((8, 1), (16, 1), (16, 2), (24, 2))  # heads of 8 dimensions: seconds a run
BUDGETS = (1, 4)  # steps as multiples of --steps: compute grows with tokens as with size
# Quick mode's: 20 and 30 steps. Two budgets are what the law across budgets needs; both are
# multiples of quick mode's validation interval (5), so each run's final loss is at its last step.
QUICK_BUDGETS = (1, 1.5)
# The equivalence margin on a loss difference: 0.05 nats, a 5% change in perplexity
# (e^0.05 = 1.051), the positions page's; on an exponent difference, the margin that moves the
# ratio of two schemes' losses by 0.05 nats over the budget's range of compute.
MARGIN = 0.05
TESTS = (
    "paired t-tests by seed of each scheme's final loss against learned positions' at every "
    "size and budget, and the difference of fitted exponents (Welch-Satterthwaite) where both "
    "laws pass their lack-of-fit F test; each with a TOST for equivalence; all p-values "
    "Bonferroni-corrected together, intervals at the matching simultaneous level."
)


@dataclass(frozen=True)
class Point:
    """One run as the fits read it: its setting, size, compute and final loss (None when it
    has none that is finite)."""

    scheme: str
    size: tuple[int, int]
    steps: int
    seed: int
    heads: int
    parameters: int
    flops_per_token: float
    tokens: int
    loss: float | None

    @property
    def compute(self) -> float:
        return self.flops_per_token * self.tokens
