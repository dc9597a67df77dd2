"""The parts of experiment_width_transfer.py: the study's settings (here), what the runs say
about each learning rate (Sweep, in sweep.py), and the page's words and tables (words.py)."""

from __future__ import annotations

PARAMETRIZATIONS = ("sp", "mup")
WIDTHS = (32, 64, 128, 256)  # d_model; the first is µP's base width (model.mup_base_width)
QUICK_WIDTHS = (8, 16)  # quick mode: the tiny model's 2 layers, heads of 2 and 4 dimensions
LAYERS = 2
HEADS = 4  # fixed, so that the head dim grows with the width, as µP's rule for it assumes
BLOCK = 64
BATCH = 8  # 16 at first: the first two runs at d_model 256 showed it would not fit the budget
VAL_BATCHES = 40
# log2 of the learning rates: seven, a factor of two apart. Chosen from single-seed SP pilots
# at 200 steps of 16 windows before the runs (d 32 best at 2^-7 of 2^-12..2^-4; d 256 better at 2^-9 than
# 2^-11), so that SP's best at the narrowest and the widest width both fall inside, with room
# above for µP's.
LR_EXPONENTS = (-11, -10, -9, -8, -7, -6, -5)
QUICK_LR_EXPONENTS = (-8, -4)  # two: a best and one it beats, in each row
# Fixed before the runs: 0.05 nats is a 5% change in perplexity (e^0.05 = 1.05), the other
# pages' margin; a loss given up by transferring that is shown within it counts as none.
MARGIN = 0.05
TESTS = (
    "a bootstrap over seeds (every resample of them) of the best learning rate per "
    "parametrization and width, of its move from the narrowest width, and of the loss given up "
    "at the widest width by using the narrowest width's best; paired t-tests by seed of that "
    "loss under SP and under µP, and of µP's against SP's at their transferred learning rates, "
    "each with a TOST for equivalence within ±0.05 nats, all p-values Bonferroni-corrected "
    "together, intervals at the matching simultaneous level."
)
