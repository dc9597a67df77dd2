"""Power laws fitted to the mean of each setting, not to every run, and whether the law fits.

    power_law_on_means         L = E + A * C^(-b) (or A * C^(-b)) fitted to the mean loss at each
                               compute value, weighted by its runs, its intervals on
                               settings - parameters degrees of freedom
    lack_of_fit                the lack-of-fit F test: the means' distance from the law against
                               the seeds' spread about the means
    exponent_interval          b's interval, or why none is given (the law does not fit)
    means_exponent_difference  one setting's b minus another's, from fits to their means

Why means: the seeds at one compute value share everything but the seed (the model's shape, its
schedule, whatever luck that size had), so they are not independent points about the law. A
size that lands below the curve pulls all its seeds with it; a fit on every run counts each
seed as evidence and takes runs - parameters df, and its interval is too narrow. Fitted to the
k means, the law's scatter about them is what the intervals are made of, with k - parameters df.
scipy loads on the first call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xfmr.runs.compare.laws import Estimate, LossLaw, Space, weighted_law
from xfmr.runs.compare.scaling import slope_difference
from xfmr.runs.compare.stats import ALPHA, CONFIDENCE, Difference


@dataclass(frozen=True)
class Refused:
    """No number, and why, in words a page can print.

    Attributes:
        reason: the sentence to print in the number's place.
    """

    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class LackOfFit:
    """The lack-of-fit F test of a curve fitted to replicated settings.

    Attributes:
        statistic: F = (lack_ss / lack_df) / (pure_ss / pure_df).
        lack_df: settings - parameters.
        pure_df: runs - settings.
        p_value: the chance of an F this large if the curve is right: F's upper tail.
        lack_ss: Σ n_i (mean_i - fitted_i)², the means' squared distance from the curve.
        pure_ss: Σ_i Σ_j (y_ij - mean_i)², the runs' squared distance from their setting's mean.
    """

    statistic: float
    lack_df: int
    pure_df: int
    p_value: float
    lack_ss: float
    pure_ss: float

    def __str__(self) -> str:
        return (f"lack-of-fit F = {self.statistic:.3g} ({self.lack_df}, {self.pure_df} df), "
                f"p = {self.p_value:.2g}")  # fmt: skip


@dataclass(frozen=True)
class MeansFit:
    """A law fitted to per-setting means, and the test of its fit.

    Attributes:
        law: the law fitted to the means, weighted by `runs`; `law.df` = settings - parameters.
        lack_of_fit: the F test; None where no setting has two runs (nothing to test with).
        compute: each setting's compute, ascending.
        means: each setting's mean loss: the geometric mean (exp of the mean log L) where the
            residuals are in log L, else the arithmetic mean.
        runs: the runs averaged at each setting.
    """

    law: LossLaw
    lack_of_fit: LackOfFit | None
    compute: tuple[float, ...]
    means: tuple[float, ...]
    runs: tuple[int, ...]


def lack_of_fit(
    groups: Sequence[Sequence[float]], fitted: Sequence[float], parameters: int
) -> LackOfFit:
    """The lack-of-fit F test (NIST/SEMATECH e-Handbook §4.4.4.4; Draper & Smith 1998, §2.1):
    with n_i values y_ij at setting i, their mean ȳ_i and the curve's value f_i there (fitted
    to every value, or to the means weighted by n_i, the same fit), the residual sum of squares
    splits into pure error Σ_ij (y_ij - ȳ_i)² on N - k df and lack of fit Σ_i n_i (ȳ_i - f_i)²
    on k - p df, and F = (lack / (k - p)) / (pure / (N - k)) has Fisher's F(k - p, N - k) when
    the curve is right. `groups` and `fitted` are in the space the curve was fitted in (log L
    for a log-space fit).

    Raises:
        ValueError: a group or fitted value per setting missing, a value not finite, no
            setting with two values (no pure error), or as many settings as parameters.
    """
    from scipy import stats

    if len(groups) != len(fitted) or not all(groups):
        raise ValueError(f"{len(groups)} groups of values against {len(fitted)} fitted values: "
                         "give one fitted value per setting and a value or more in each group")  # fmt: skip
    values = [v for group in groups for v in group]
    if not all(math.isfinite(v) for v in [*values, *fitted]):
        raise ValueError(f"values and fitted values must be finite: {groups}, {fitted}")
    pure_df, lack_df = len(values) - len(groups), len(groups) - parameters
    if pure_df < 1 or lack_df < 1:
        raise ValueError(f"the lack-of-fit test needs a setting with two runs and more settings "
                         f"than the {parameters} parameters: {len(values)} runs in "
                         f"{len(groups)} settings")  # fmt: skip
    means = [sum(group) / len(group) for group in groups]
    pure_ss = sum((v - mean) ** 2 for group, mean in zip(groups, means, strict=True) for v in group)
    lack_ss = sum(len(group) * (mean - f) ** 2
                  for group, mean, f in zip(groups, means, fitted, strict=True))  # fmt: skip
    if pure_ss == 0:  # identical replicates: any distance of the means is infinitely many sds
        statistic = math.inf if lack_ss > 0 else math.nan
    else:
        statistic = (lack_ss / lack_df) / (pure_ss / pure_df)
    p_value = math.nan if math.isnan(statistic) else float(stats.f.sf(statistic, lack_df, pure_df))
    return LackOfFit(float(statistic), lack_df, pure_df, p_value, float(lack_ss), float(pure_ss))


def power_law_on_means(
    compute: Sequence[float],
    loss: Sequence[float],
    *,
    irreducible: bool,
    space: Space = "log",
    confidence: float = CONFIDENCE,
) -> MeansFit:
    """The law fitted to each setting's mean (runs with equal compute are one setting's
    replicates), weighted by its number of runs n_i: minimising Σ_i n_i (ȳ_i - f_i)², ȳ_i
    the mean in the residuals' space (of log L for space "log"). Weighted, because then (a)
    the estimates are those of the fit to every run (Σ_ij (y_ij - f_i)² is that sum plus the
    pure error, which no parameter moves), so only the intervals change, and (b) the error
    variance s² = Σ n_i (ȳ_i - f_i)² / (k - p) is the lack-of-fit mean square, the F test's
    numerator: the intervals and the test rest on one model. With equal runs per setting the
    weights are equal and the fit is the unweighted one. The intervals have k - p df, k the
    settings and p the parameters, never the runs; with replicates the lack-of-fit test is run.

    Raises:
        ValueError: lengths that differ, a value not positive and finite, or as in
            `laws.weighted_law` (fewer than p + 1 distinct compute values, ...).
    """
    if len(compute) != len(loss):
        raise ValueError(f"{len(compute)} values of compute against {len(loss)} of loss")
    if not all(math.isfinite(v) and v > 0 for v in [*compute, *loss]):
        raise ValueError(f"compute and loss must be positive and finite: {[*compute, *loss]}")
    transform = math.log if space == "log" else float
    settings = sorted(set(compute))
    groups = [[transform(value) for c, value in zip(compute, loss, strict=True) if c == setting]
              for setting in settings]  # fmt: skip
    means = [sum(group) / len(group) for group in groups]
    in_loss = [math.exp(m) for m in means] if space == "log" else means
    runs = [len(group) for group in groups]
    law = weighted_law(settings, in_loss, runs, irreducible=irreducible, space=space,
                       confidence=confidence)  # fmt: skip
    test = None
    if max(runs) > 1:
        fitted = [transform(law.loss(setting)) for setting in settings]
        test = lack_of_fit(groups, fitted, law.parameters)
    return MeansFit(law, test, tuple(settings), tuple(in_loss), tuple(runs))


def exponent_interval(fit: MeansFit, *, alpha: float = ALPHA) -> Estimate | Refused:
    """b with its interval (at the fit's confidence, on settings - parameters df), or Refused
    where the lack-of-fit test rejects the law at `alpha`: an exponent of a curve the means do
    not follow describes nothing. Without replicates there is no test, and the interval is
    given; its s² then holds any lack of fit, which widens it."""
    misfit = _misfit(fit, alpha)
    if misfit is not None:
        return Refused(f"the {misfit}; no exponent is reported")
    return fit.law.exponent


def means_exponent_difference(
    fit: MeansFit, other: MeansFit, *, alpha: float = ALPHA, confidence: float = CONFIDENCE
) -> Difference | Refused:
    """fit's b minus other's, its interval at `confidence` and two-sided p-value, by
    `scaling.slope_difference` (Welch-Satterthwaite df from each fit's settings - parameters);
    Refused where either law fails its lack-of-fit test at `alpha`. Positive: `fit`'s loss
    falls faster with compute."""
    for which, one in (("first", fit), ("second", other)):
        misfit = _misfit(one, alpha)
        if misfit is not None:
            return Refused(f"the {which} setting's {misfit}; no exponent difference is reported")
    slopes = [(f.law.exponent.value, f.law.exponent.stderr, f.law.df) for f in (fit, other)]
    return slope_difference(*slopes, confidence=confidence)


def _misfit(fit: MeansFit, alpha: float) -> str | None:
    """Why the law does not fit, where its lack-of-fit test rejects at `alpha`; else None."""
    test = fit.lack_of_fit
    if test is None or not test.p_value < alpha:
        return None
    law = "power law with an irreducible term" if fit.law.irreducible else "power law"
    return f"{law} does not fit: {test}"
