"""Every difference an experiment page tests, corrected as one family.

A page that reports several differences reports one family of tests: each difference's own
two-sided p-value and its TOST against ±margin (`xfmr.runs.compare.verdicts.tost`), all
Bonferroni-corrected together (`multiplicity.correct_p_values`), and each difference's interval
computed at the matching simultaneous level (`multiplicity.simultaneous_confidence`), so that
every interval on the page holds at once with 95% confidence and excludes 0 exactly when its
corrected p is below 0.05. The verdict of each (different / equivalent within ±margin /
inconclusive) comes from the corrected p-values.

A difference is given as a function of the confidence level, since its interval is computed
once at 95% to count the tests and again at the family's level: `paired_at(values, baseline)`
for values paired by seed, or any function of a confidence that returns an
`xfmr.runs.compare.stats.Difference` (an exponent difference, say), or None where the test
cannot run (fewer than two pairs), which then does not count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Literal

from xfmr.runs.compare.multiplicity import correct_p_values, simultaneous_confidence
from xfmr.runs.compare.stats import Difference, paired
from xfmr.runs.compare.verdicts import tost, verdict

Made = Callable[[float], Difference | None]  # a difference at a confidence level
Correction = Literal["bonferroni", "holm"]


def paired_at(values: Sequence[float], baseline: Sequence[float]) -> Made:
    """The paired difference of values[i] - baseline[i] (same seed), at a confidence."""
    return lambda confidence: paired(values, baseline, confidence=confidence)


class Family:
    """The page's differences, keyed as the caller likes, each with its interval at the
    family's simultaneous level and its corrected p-values (Bonferroni's, or Holm's) and verdict.

    Attributes:
        keys: the differences that could be tested, in the order given.
        count: the p-values corrected together (two per tested difference).
        level: the confidence of each interval.
        differences, p, p_equivalent, verdicts: by key.
    """

    def __init__(
        self,
        made: Mapping[Hashable, Made],
        margin: float,
        margins: Mapping[Hashable, float] | None = None,
        *,
        correction: Correction = "bonferroni",
    ) -> None:
        """`margin`: the equivalence margin of every difference, but those `margins` names
        (differences in other units: an exponent's, say). `correction`: how the p-values are
        corrected together, "bonferroni" or "holm" (the module's docstring)."""
        if correction not in ("bonferroni", "holm"):
            raise ValueError(f"correction={correction!r}: give 'bonferroni' or 'holm'")
        self.margin = margin
        self.correction = correction
        self.margins = {key: (margins or {}).get(key, margin) for key in made}
        plain = {key: make(0.95) for key, make in made.items()}
        self.keys = [key for key, found in plain.items() if found is not None]
        raw = [plain[k].p_value for k in self.keys]
        raw += [tost(plain[k], self.margins[k]) for k in self.keys]
        self.count = sum(1 for p in raw if not math.isnan(p))
        self.level = simultaneous_confidence(max(self.count, 1))
        corrected = correct_p_values(raw, method=correction)
        self.differences: dict[Hashable, Difference] = {}
        self.p: dict[Hashable, float] = {}
        self.p_equivalent: dict[Hashable, float] = {}
        self.verdicts: dict[Hashable, str] = {}
        for i, key in enumerate(self.keys):
            found = made[key](self.level)
            assert found is not None, "a difference that ran at 95% runs at any level"
            self.differences[key] = found
            self.p[key], self.p_equivalent[key] = corrected[i], corrected[len(self.keys) + i]
            self.verdicts[key] = verdict(self.p[key], self.p_equivalent[key], self.margins[key])

    def cells(self, key: Hashable, spec: str = "+.3f") -> list[str]:
        """Δ [simultaneous interval], test, p, p equivalent, verdict; dashes when untested."""
        if key not in self.differences:
            return ["-"] * 5
        d = self.differences[key]
        return [f"{d.delta:{spec}} [{d.low:{spec}}, {d.high:{spec}}]", d.test, p_shown(self.p[key]),
                p_shown(self.p_equivalent[key]), self.verdicts[key]]  # fmt: skip

    def says(self, key: Hashable, words: str) -> bool:
        """The key's verdict is `words` ("different") or begins with them ("equivalent" ...)."""
        found = self.verdicts.get(key, "")
        return found == words or found.startswith(words + " ")

    def explained(self) -> str:
        """The sentence a page's scope gives its tests: how many, how corrected, what level."""
        if self.correction == "holm":
            return self._explained_holm()
        return (
            f"{self.count} p-values (each difference's, and its TOST's against ±{self.margin:g} "
            "or the margin its table states), "
            f"Bonferroni-corrected together, and each difference's interval at {self.level:.5f} "
            "(`multiplicity.simultaneous_confidence`), so that all hold together at 95% and an "
            "interval excludes 0 exactly when its corrected p is below 0.05. A TOST at the "
            f"corrected level ({1 - self.level:.5f} a side) shows equivalence exactly when the "
            f"narrower {1 - 2 * (1 - self.level):.4f} interval lies within the margin, so a shown "
            "interval that reaches a little past it can still read as equivalent."
        )

    def _explained_holm(self) -> str:
        return (
            f"{self.count} p-values (each difference's, and its TOST's against ±{self.margin:g} "
            "or the margin its table states), corrected together by Holm's step-down (Holm "
            "1979; `multiplicity.correct_p_values(method='holm')`), which holds the chance of "
            "any false finding among them to 5% as Bonferroni does and rejects all it rejects "
            "and perhaps more. Holm has no intervals of its own: each difference's interval is at "
            f"Bonferroni's simultaneous level, {self.level:.5f} "
            "(`multiplicity.simultaneous_confidence`), so all hold together at 95%, and a "
            "difference Holm finds can still have an interval that reaches 0. A verdict is read "
            "from the Holm-corrected p-values."
        )


def p_shown(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"
