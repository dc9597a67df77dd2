"""The scaling page's closing section, written from the numbers (so a rerun that finds
otherwise says so)."""

from __future__ import annotations

import math

from common.family import Family, p_shown
from scaling import BASELINE, MARGIN, SCHEMES, Point


def conclusions(points: list[Point], fits: dict, budgets: list[int], tests: Family) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    return "\n\n".join(["## What it shows", _fitted(fits, budgets), _one_law(fits, points),
                        *(_gap(points, pos, budgets, tests) for pos in SCHEMES[1:]), NO_MUP])  # fmt: skip


# Where the µP row (issue 42) is not: fixed words, since no run of this page's stands behind it.
NO_MUP = (
    "**No µP row.** Every loss here is the standard parametrization (SP) at the recipe's one "
    "learning rate, 1e-3, at every size, so a size's loss may lie some way from what its own "
    "best learning rate would give, and the law mixes the effect of size with that of a "
    "learning rate tuned for none of them. A µP row (`model.parametrization=mup`) was not run: "
    "this ladder grows depth (1 to 4 layers) with width and keeps heads of 16 dimensions, "
    "adding heads, while µP as xfmr builds it transfers a learning rate across width at a "
    "fixed depth and a fixed number of heads (`model.mup_base_width` must divide by "
    "`model.n_heads`), so the row would need a new ladder, a learning-rate sweep at its base "
    "width and the whole study run again. What was run instead is "
    "[width-transfer.md](width-transfer.md): learning-rate sweeps at four widths of a 2-layer "
    "model under SP and under µP, which measures how far the best learning rate moves with "
    "width under each; this page's fits are unchanged by it."
)


def _fitted(fits: dict, budgets: list[int]) -> str:
    """Per budget, the schemes whose law fits (with b) and those whose law is rejected."""
    from xfmr.runs.compare.replicates import exponent_interval

    told = []
    for steps in budgets:
        fit_, rejected = [], []
        for pos in SCHEMES:
            found = fits[(pos, steps)]
            b = None if isinstance(found, str) else exponent_interval(found)
            if b is None or hasattr(b, "reason"):
                rejected.append(pos)
            else:
                fit_.append(f"{pos} b = {b}")
        sizes = len(next(f for f in fits.values() if not isinstance(f, str)).compute)
        told.append(f"At {steps} steps, the lack-of-fit test does not reject the law over the "
                    f"{sizes} sizes' means for {'; '.join(fit_) or 'no scheme'}; it rejects it "
                    f"(or no law could be fitted) for {', '.join(rejected) or 'no scheme'}.")  # fmt: skip
    return " ".join(told) + (" Where the law holds, each doubling of compute multiplies the "
                             "reducible loss L - E by 2^(-b).")  # fmt: skip


def _one_law(fits: dict, points: list[Point]) -> str:
    """Whether one law in C holds across both budgets, scheme by scheme, and which budget's
    means lie below it where it does not (the mean of log(mean / law) over its settings)."""
    said = []
    for pos in SCHEMES:
        found = fits[(pos, None)]
        if isinstance(found, str) or found.lack_of_fit is None:
            said.append(f"{pos}: not tested")
            continue
        test = found.lack_of_fit
        word = "rejected" if test.p_value < 0.05 else "not rejected"
        below = {}
        for steps in sorted({p.steps for p in points}):
            mine = {p.compute for p in points if p.scheme == pos and p.steps == steps}
            residuals = [math.log(mean / found.law.loss(c))
                         for c, mean in zip(found.compute, found.means, strict=True) if c in mine]  # fmt: skip
            below[steps] = sum(residuals) / len(residuals)
        where = ", ".join(f"{steps} steps {value:+.3f}" for steps, value in below.items())
        said.append(f"{pos}: {word} ({test}; mean log residual by budget: {where})")
    return ("One law in C across both budgets, as if compute alone set the loss whatever its "
            "split between size and tokens: " + "; ".join(said) + ". Where it is rejected, the "
            "same compute spent as a larger model for fewer steps and as a smaller one for "
            "more did not give the same loss in these runs; the budget whose means lie below "
            "the law (negative residual) reached lower losses for its compute.")  # fmt: skip


def _gap(points: list[Point], pos: str, budgets: list[int], tests: Family) -> str:
    """pos against learned: at how many settings it is lower, higher, equivalent or undecided,
    and what the exponents say about the gap's trend."""
    keys = [k for k in tests.keys if len(k) == 3 and k[0] == pos]
    lower = [k for k in keys if tests.says(k, "different") and tests.differences[k].delta < 0]
    higher = [k for k in keys if tests.says(k, "different") and tests.differences[k].delta > 0]
    equal = [k for k in keys if tests.says(k, "equivalent") or tests.says(k, "different, but")]
    counts = (f"{pos} against {BASELINE}, setting by setting ({len(keys)} settings): lower at "
              f"{len(lower)}, higher at {len(higher)}, shown within ±{MARGIN} nats at "
              f"{len(equal)}, neither at {len(keys) - len(set(lower + higher + equal))}.")  # fmt: skip
    trend = []
    for steps in budgets:
        key = (pos, steps)
        if key not in tests.differences:
            trend.append(f"at {steps} steps no exponent difference (a law failed its test)")
            continue
        d = tests.differences[key]
        trend.append(f"at {steps} steps b - b({BASELINE}) = {d.delta:+.4f} "
                     f"[{d.low:+.4f}, {d.high:+.4f}], {tests.verdicts[key]} "
                     f"(p {p_shown(tests.p[key])})")  # fmt: skip
    faster = [k for k in tests.keys if len(k) == 2 and k[0] == pos and tests.says(k, "different")]
    reading = (f"so the exponents show {pos}'s gap to {BASELINE} changing with compute at "
               + ", ".join(f"{k[1]} steps" for k in faster) if faster else
               f"so these runs do not show {pos}'s gap to {BASELINE} growing or shrinking "
               "with compute")  # fmt: skip
    return counts + " In exponent: " + "; ".join(trend) + f"; {reading}."
