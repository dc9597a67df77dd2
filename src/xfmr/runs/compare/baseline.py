"""Each setting against a baseline setting, as the grouped table's columns: the difference of
means by the paired t-test where the seeds pair (runs that share a seed share their
initialisation and data order, so the differences cancel what the seed does) and Welch's
otherwise, its effect size, the p-values Holm-corrected over the settings, and, when asked,
equivalence within a margin (TOST) and the seeds that would detect a given difference."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xfmr.runs.compare.stats import (
    ALPHA,
    MIN_RUNS,
    POWER,
    Difference,
    equivalence,
    holm,
    paired,
    seeds_needed,
    welch,
)

# The (seed, final metric) of each completed run of a setting; the seed None where unknown.
Sample = Sequence[tuple[str | None, float]]

TEST = "test"
DELTA_COLUMNS = ("Δ vs baseline", "Δ 95% CI low", "Δ 95% CI high")
EFFECT = "effect size (d or d_z)"
P_COLUMNS = ("p (t-test)", "p (Holm)", "significant")
TOST_HOLM = "p (TOST Holm)"
PLANNING_SD = "sd for power"


@dataclass(frozen=True)
class Questions:
    """What each setting is asked beyond 'does it differ from the baseline'.

    Attributes:
        equivalence: the margin, in the metric's units, within which a difference counts as
            none (TOST against ±margin); None: not asked.
        detect: the difference to plan seeds for (80% power); None: not asked.
    """

    equivalence: float | None = None
    detect: float | None = None

    def columns(self) -> list[str]:
        """The columns these questions add to a row, in order."""
        columns = [TEST, *DELTA_COLUMNS, EFFECT, *P_COLUMNS]
        if self.equivalence is not None:
            columns += [tost_column(self.equivalence), TOST_HOLM, verdict_column(self.equivalence)]
        if self.detect is not None:
            columns += [seeds_column(self.detect), PLANNING_SD]
        return columns


def tost_column(margin: float) -> str:
    return f"p (TOST ±{margin:g})"


def verdict_column(margin: float) -> str:
    return f"equivalence (±{margin:g})"


def seeds_column(difference: float) -> str:
    return f"seeds to detect {difference:g}"


def against_baseline(
    samples: Mapping[Hashable, Sample], baseline: Hashable, questions: Questions
) -> dict[Hashable, dict[str, Any]]:
    """The cells `questions.columns()` of each setting's row (and a `note` where no test could
    run), every setting tested against `baseline` and the p-values Holm-corrected together."""
    cells = {key: dict.fromkeys(questions.columns()) for key in samples}
    cells[baseline]["significant"] = "baseline"
    tested, tost = {}, {}
    for key, sample in samples.items():
        if key == baseline:
            continue
        difference, tost_p = _test(sample, samples[baseline], questions.equivalence)
        if difference is None:
            cells[key]["note"] = (
                f"no test: needs {MIN_RUNS} completed runs here and in the baseline"
            )
            continue
        cells[key].update(_difference_cells(difference, questions))
        tested[key] = difference.p_value
        if tost_p is not None:
            cells[key][tost_column(questions.equivalence)] = tost_p
            tost[key] = tost_p
    for key, corrected in zip(tested, holm(list(tested.values())), strict=True):
        cells[key]["p (Holm)"] = corrected
        cells[key]["significant"] = "yes" if corrected < ALPHA else "no"
    for key, corrected in zip(tost, holm(list(tost.values())), strict=True):
        cells[key][TOST_HOLM] = corrected
        cells[key][verdict_column(questions.equivalence)] = _verdict(
            cells[key]["significant"] == "yes", corrected < ALPHA, questions.equivalence
        )
    return cells


def footnote(named: str, settings: int, questions: Questions) -> str:
    """What the columns `questions` adds are, for the table's title."""
    text = (
        f"Δ = mean - mean of {named}: by the paired t-test over the seeds both share where every "
        f"seed of the baseline ran here (test: paired (n=shared seeds); Δ the mean per-seed "
        f"difference), else Welch's; its 95% CI; effect size Cohen's d (Δ / pooled sd) for "
        f"Welch, d_z (Δ / sd of the per-seed differences) for paired; p Holm-corrected over "
        f"{settings} settings, significant where < {ALPHA:g}"
    )
    if questions.equivalence is not None:
        margin = f"±{questions.equivalence:g}"
        text += (
            f"; equivalence: two one-sided tests (TOST) that Δ lies within {margin}, the larger "
            f"one-sided p, Holm-corrected over the settings: 'equivalent within {margin}' where "
            f"< {ALPHA:g}, 'different' where the t-test is significant, else 'not shown'"
        )
    if questions.detect is not None:
        text += (
            f"; {seeds_column(questions.detect)}: seeds per setting for {POWER:.0%} power to "
            f"detect |Δ| = {questions.detect:g} at α = {ALPHA:g} two-sided (before Holm), by "
            f"the noncentral t with the row's {PLANNING_SD}: pooled sd (Welch) or sd of the "
            f"per-seed differences (paired)"
        )
    return text


def paired_samples(sample: Sample, baseline: Sample) -> tuple[list[float], list[float]] | None:
    """The setting's and the baseline's values seed by seed, over the baseline's seeds, when
    every one of them ran here (each seed once a side, at least MIN_RUNS); else None."""
    mine, theirs = _by_seed(sample), _by_seed(baseline)
    if mine is None or theirs is None or len(theirs) < MIN_RUNS or not theirs.keys() <= mine.keys():
        return None
    return [mine[seed] for seed in theirs], list(theirs.values())


def _by_seed(sample: Sample) -> dict[str, float] | None:
    """Seed to value; None when a seed is unknown or repeats (then nothing pairs one to one)."""
    seeds = [seed for seed, _ in sample]
    if None in seeds or len(set(seeds)) < len(seeds):
        return None
    return {seed: value for seed, value in sample if seed is not None}


def _test(
    sample: Sample, baseline: Sample, margin: float | None
) -> tuple[Difference | None, float | None]:
    """The paired test where the seeds pair, else Welch's; with a margin, the TOST p too."""
    pairs = paired_samples(sample, baseline)
    if pairs is not None:
        values, reference = pairs
        difference = paired(values, reference)
    else:
        values, reference = [v for _, v in sample], [v for _, v in baseline]
        difference = welch(values, reference)
    if difference is None or margin is None:
        return difference, None
    return difference, equivalence(values, reference, margin, pair=pairs is not None)


def _difference_cells(difference: Difference, questions: Questions) -> dict[str, Any]:
    cells = {
        TEST: difference.test,
        **dict(
            zip(DELTA_COLUMNS, (difference.delta, difference.low, difference.high), strict=True)
        ),
        EFFECT: difference.effect_size,
        "p (t-test)": difference.p_value,
    }
    if questions.detect is not None:
        pair = difference.pairs is not None
        cells[seeds_column(questions.detect)] = seeds_needed(
            questions.detect, difference.spread, pair=pair
        )
        cells[PLANNING_SD] = difference.spread
    return cells


def _verdict(different: bool, equivalent: bool, margin: float) -> str:
    """A difference can be significant and still smaller than the margin: both are said."""
    within = f"within ±{margin:g}"
    if different:
        return f"different, but {within}" if equivalent else "different"
    return f"equivalent {within}" if equivalent else "not shown"
