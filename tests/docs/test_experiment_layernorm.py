"""benchmarks/experiment_layernorm.py: how it sorts runs (non-finite, collapsed to the unigram,
learned), its family of tests on made-up outcomes against scipy directly (Fisher's exact test,
paired t and TOST by hand, one Bonferroni correction), the answer it writes from them, and the
script end to end in quick mode: every run of the grid trained and named for its setting,
every number of its tables recomputed from the runs' own results.json, the counts adding up,
and a second call that reuses the runs."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from itertools import product
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from scipy import stats

from helpers.experiment_scripts import benchmark_script, is_png, run_quick, tables

PLACEMENTS, LRS, WARMUPS = ("pre", "post"), ("0.001", "0.003"), ("0", "0.3")
SEEDS = (1, 2)  # quick mode's
MARGIN = COLLAPSE = 0.05  # as the page states them
SECTIONS = ("# Layer norm placement and warm-up", "## Scope", "## How the runs ended",
            "## What warm-up changed", "## What it shows", "## Machine and time")  # fmt: skip
TRAINED_LINE = re.compile(r"^  \S+-seed\d: (completed|failed), ", re.MULTILINE)
UNTESTED = ["fewer than 2 learned pairs", "-", "-", "-", "-"]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return benchmark_script("experiment_layernorm")


def unigram_loss(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log(n / len(text)) for n in counts.values())


def by_hand(values: list[float], baseline: list[float], count: int) -> dict:
    """The paired difference as the page claims it: mean of per-seed differences, its t
    interval at 1 - 0.05 / count, the paired t-test's and TOST's p-values times count (at
    most 1), and the verdict they give."""
    diffs = [a - b for a, b in zip(values, baseline, strict=True)]
    n, mean = len(diffs), statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(n)
    half = stats.t.ppf(1 - 0.05 / count / 2, n - 1) * se
    p = min(1.0, count * float(stats.ttest_rel(values, baseline).pvalue))
    tost = max(stats.t.sf((mean + MARGIN) / se, n - 1), stats.t.cdf((mean - MARGIN) / se, n - 1))
    p_eq = min(1.0, count * float(tost))
    if p < 0.05:
        said = "different, but within ±0.05" if p_eq < 0.05 else "different"
    else:
        said = "equivalent within ±0.05" if p_eq < 0.05 else "inconclusive (neither)"
    return {"delta": mean, "low": mean - half, "high": mean + half, "p": p, "p_eq": p_eq,
            "verdict": said, "n": n}  # fmt: skip


def check_cells(cells: list[str], expected: dict | None, pairs: int) -> None:
    """A row's pairs, Δ [interval], test, p, p equivalent and verdict against `by_hand`."""
    assert int(cells[0]) == pairs, cells
    if expected is None:
        assert cells[1:] == UNTESTED, cells
        return
    delta, low, high = (
        float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cells[1]).groups()
    )
    assert (delta, low, high) == pytest.approx(
        (expected["delta"], expected["low"], expected["high"]), abs=6e-4), cells  # fmt: skip
    assert cells[2] == f"paired (n={pairs})"
    assert float(cells[3]) == pytest.approx(expected["p"], rel=6e-3, abs=1e-12), cells
    assert float(cells[4]) == pytest.approx(expected["p_eq"], rel=6e-3, abs=1e-12), cells
    assert cells[5] == expected["verdict"], cells


def test_a_run_is_non_finite_collapsed_or_learned(script: ModuleType) -> None:
    def run(status: str, loss: float, history: list[float]) -> SimpleNamespace:
        return SimpleNamespace(status=status, metrics={"val/loss": loss},
                               results={"history": [{"val/loss": v} for v in history]})  # fmt: skip

    unigram = 3.0
    kinds = {
        ("failed", 2.0): script.NON_FINITE,  # stopped by xfmr: whatever it last logged
        ("completed", unigram - COLLAPSE + 0.001): script.COLLAPSED,  # within 0.05 of it
        ("completed", unigram + 0.3): script.COLLAPSED,  # above it
        ("completed", math.nan): script.COLLAPSED,  # no finite loss: learned nothing shown
        ("completed", unigram - COLLAPSE - 0.001): script.LEARNED,
    }
    for (status, loss), kind in kinds.items():
        assert script.outcome(run(status, loss, []), unigram).kind == kind, (status, loss)
    found = script.outcome(run("completed", 2.4, [3.0, 2.5, 2.7, 2.4]), unigram)
    assert found.loss == 2.4 and found.rise == pytest.approx(0.2)
    assert script.outcome(run("completed", 2.4, [2.4]), unigram).rise is None


def made_up(script: ModuleType) -> dict:
    """Eight seeds. Pre-LN learns everywhere; warm-up leaves its loss at 1e-3 and lowers it by
    0.3 at 3e-3. Post-LN learns at 1e-3, gaining 0.5 from warm-up; at 3e-3 every run without
    warm-up collapses (seed 1's goes non-finite) and every run with it learns. Each seed shifts
    all its runs alike (paired away) and adds a little noise of its own."""
    gain = {("pre", 1e-3): 0.0, ("pre", 3e-3): 0.3, ("post", 1e-3): 0.5}
    outcomes = {}
    for placement, lr, warmup, seed in product(("pre", "post"), (1e-3, 3e-3), (0.0, 0.3),
                                               range(1, 9)):  # fmt: skip
        noise = 0.004 * ((seed * 7 + int(warmup * 10) * 3 + (placement == "post")) % 5 - 2)
        loss = 2.2 + 0.05 * seed + noise + (gain.get((placement, lr), 0.0) if not warmup else 0)
        if placement == "post" and lr == 3e-3 and not warmup:
            outcome = (script.Outcome(script.NON_FINITE, None, None) if seed == 1
                       else script.Outcome(script.COLLAPSED, 3.4, 0.1))  # fmt: skip
        else:
            outcome = script.Outcome(script.LEARNED, loss, 0.0)
        outcomes[(placement, lr, warmup, seed)] = outcome
    return outcomes


def test_the_family_of_tests_agrees_with_scipy_by_hand(script: ModuleType) -> None:
    assert (script.LRS, script.WARMUPS) == ((1e-3, 3e-3), (0.0, 0.3))  # as made_up builds them
    outcomes = made_up(script)
    tests = script.Tested(outcomes, 8)
    # 4 Fisher tests; 3 gains (post-LN at 3e-3 has no learned pair) and 1 interaction (at
    # 3e-3 post-LN pairs with nothing), each with its TOST.
    tested = [("gain", "pre", 1e-3), ("gain", "pre", 3e-3), ("gain", "post", 1e-3),
              ("interaction", 1e-3)]  # fmt: skip
    assert tests.keys == tested and tests.count == 4 + 2 * 4
    assert tests.level == pytest.approx(1 - 0.05 / 12)
    assert tests.tables[("post", 3e-3)] == [[8, 0], [0, 8]]
    assert tests.tables[("pre", 3e-3)] == [[0, 8], [0, 8]]
    assert tests.fisher_raw[("post", 3e-3)] == pytest.approx(2 / math.comb(16, 8))
    assert tests.fisher[("post", 3e-3)] == pytest.approx(12 * 2 / math.comb(16, 8))
    assert tests.fisher[("pre", 1e-3)] == 1.0
    # 8 of 8 against 0 of 8 is the most a test of 8 seeds can show: enough for 12 tests.
    assert tests.least_corrected == pytest.approx(12 * 2 / math.comb(16, 8))
    assert tests.least_corrected < 0.05
    assert tests.collapse_said("post", 3e-3) == "fewer with warm-up"
    assert tests.collapse_said("pre", 3e-3).startswith("not shown")

    def losses(placement: str, lr: float, warmup: float) -> list[float]:
        return [outcomes[(placement, lr, warmup, s)].loss for s in range(1, 9)]

    for key in tested[:3]:
        _, placement, lr = key
        expected = by_hand(losses(placement, lr, 0.0), losses(placement, lr, 0.3), 12)
        check_cells(tests.cells(key), expected, 8)
    post, pre = ([a - b for a, b in zip(losses(p, 1e-3, 0.0), losses(p, 1e-3, 0.3), strict=True)]
                 for p in ("post", "pre"))  # fmt: skip
    check_cells(tests.cells(("interaction", 1e-3)), by_hand(post, pre, 12), 8)
    assert tests.cells(("gain", "post", 3e-3)) == ["0", *UNTESTED]
    assert tests.verdicts[("gain", "pre", 3e-3)] == "different"
    assert tests.verdicts[("gain", "pre", 1e-3)] == "equivalent within ±0.05"
    assert tests.verdicts[("interaction", 1e-3)] == "different"

    # The answer follows the corrected tests: the collapse counts at 3e-3 (8 of 8 against 0
    # of 8, beyond chance over 12 tests, pre-LN's not) and the interaction at 1e-3.
    shown = script.conclusions(tests)
    assert shown.startswith("## What it shows\n\nOn these runs, yes: warm-up cut post-LN's "
                            "collapses beyond chance at lr 0.003, where pre-LN's counts show no "
                            "such change (two tests, not one test of their difference); post-LN "
                            "gained more from warm-up than pre-LN at lr 0.001.")  # fmt: skip
    assert ("More post-LN runs collapsed or went non-finite without warm-up than with it at lr "
            "0.003 (8 of 8 without, 0 with; corrected p 0.00186); beyond chance after the "
            "correction at lr 0.003.") in shown  # fmt: skip
    assert "No more pre-LN runs collapsed without warm-up than with it at any lr." in shown
    assert "equivalent within ±0.05 at lr 0.001 (" in shown and "no difference" not in shown
    assert "untested (fewer than 2 learned pairs) at lr 0.003 (0 learned pairs)" in shown
    assert "lr 0.003: 0 learned pairs, untested" in shown


@pytest.mark.slow
def test_the_layernorm_page_is_written_from_its_runs(tmp_path: Path, script: ModuleType) -> None:
    runs, page_dir = tmp_path / "runs", tmp_path / "page"
    first = run_quick("experiment_layernorm.py", tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    grid = list(product(PLACEMENTS, LRS, WARMUPS))
    assert len(TRAINED_LINE.findall(first.stdout)) == len(grid) * len(SEEDS), first.stdout
    names = {f"{p}-lr{lr}-warmup{w}-seed{s}" for (p, lr, w), s in product(grid, SEEDS)}
    assert {d.name for d in runs.iterdir()} == names
    text = (page_dir / "layernorm.md").read_text()
    for section in SECTIONS:
        assert f"\n{section}\n" in f"\n{text}", f"no {section!r} on the page:\n{text}"
    assert "> Quick mode:" in text and "no difference" not in text
    assert f"\n**Tests:** {script.TESTS}\n" in text
    assert all(words in script.TESTS for words in ("Fisher's exact", "paired t", "by seed",
                                                   "TOST", "±0.05", "Bonferroni"))  # fmt: skip
    steps, batch, block, tokens = re.search(
        r"(\d+) steps of (\d+) windows of (\d+) characters \(\1 x \2 x \3 = ([\d,]+) characters "
        r"seen per run\), from the first 90% of `words.txt`", text).groups()  # fmt: skip
    some = json.loads((runs / min(names) / "results.json").read_text())
    assert int(steps) == some["step"] and f"data.batch_size={batch}" in some["overrides"]
    assert int(tokens.replace(",", "")) == int(steps) * int(batch) * int(block)
    assert "early training of one recipe" in text and "AdamW" in text

    full = (tmp_path / "words.txt").read_text()
    unigram = unigram_loss(full[int(len(full) * 0.9) :])
    assert f"unigram loss of the validation split, {unigram:.3f} nats" in text
    assert f"within {COLLAPSE} nats of the unigram loss" in text
    kinds = read_runs(runs, unigram)
    outcomes, fisher, gain = tables(text, "placement")
    [interaction] = tables(text, "lr")
    check_outcomes(outcomes, kinds)
    count = check_tests(text, kinds, fisher, gain, interaction)
    assert f"each difference's interval is at {1 - 0.05 / count:.5f}" in text

    figure = page_dir / "layernorm" / "loss_by_lr.png"
    assert is_png(figure) and figure.stat().st_size > 5000
    assert "](layernorm/loss_by_lr.png)" in text and "*final validation loss (nats) against" in text

    # A second call finds every run finished, trains none of them again, writes the same tables.
    written = {name: (runs / name / "results.json").stat().st_mtime_ns for name in names}
    second = run_quick("experiment_layernorm.py", tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert not TRAINED_LINE.search(second.stdout), second.stdout
    assert {n: (runs / n / "results.json").stat().st_mtime_ns for n in names} == written
    again = (page_dir / "layernorm.md").read_text()
    assert tables(again, "placement") == [outcomes, fisher, gain]


def read_runs(runs: Path, unigram: float) -> dict:
    """(placement, lr, warmup) -> seed -> (kind, final loss, history) from each run's
    results.json, each run checked to be the setting its directory names."""
    kinds: dict = {}
    for placement, lr, warmup, seed in product(PLACEMENTS, LRS, WARMUPS, SEEDS):
        result = json.loads((runs / f"{placement}-lr{lr}-warmup{warmup}-seed{seed}"
                             / "results.json").read_text())  # fmt: skip
        assert {f"model.placement={placement}", f"optim.lr={lr}", f"seed={seed}",
                f"schedule.warmup_ratio={warmup}", "size=tiny"} <= set(result["overrides"])  # fmt: skip
        loss = result["metrics"].get("val/loss")
        kind = ("non-finite" if result["status"] == "failed" else
                "learned" if loss is not None and loss < unigram - COLLAPSE else "collapsed")  # fmt: skip
        assert result["status"] in ("completed", "failed")
        kinds.setdefault((placement, lr, warmup), {})[seed] = (kind, loss, result["history"])
    return kinds


def check_outcomes(rows: list[list[str]], kinds: dict) -> None:
    """Each setting's counts, its learned runs' mean and 95% t interval, and its worst rise."""
    assert [tuple(row[:3]) for row in rows] == list(product(PLACEMENTS, LRS, WARMUPS))
    for placement, lr, warmup, completed, non_finite, collapsed, learned, loss, rise in rows:
        found = Counter(kind for kind, _, _ in kinds[(placement, lr, warmup)].values())
        assert (int(non_finite), int(collapsed), int(learned)) == (
            found["non-finite"], found["collapsed"], found["learned"])  # fmt: skip
        assert int(completed) == int(collapsed) + int(learned) == len(SEEDS) - int(non_finite)
        finals = [v for kind, v, _ in kinds[(placement, lr, warmup)].values() if kind == "learned"]
        if not finals:
            assert loss == "-", loss
        elif len(finals) == 1:
            assert float(loss) == pytest.approx(finals[0], abs=6e-4)
        else:
            mean = statistics.fmean(finals)
            low, high = stats.t.interval(0.95, len(finals) - 1, mean, stats.sem(finals))
            assert loss == f"{mean:.3f} [{low:.3f}, {high:.3f}]", (loss, finals)
        worst = [max([0.0, *(f[i] - min(f[:i]) for i in range(1, len(f)))])
                 for _, _, history in kinds[(placement, lr, warmup)].values()
                 if len(f := [h["val/loss"] for h in history if "val/loss" in h]) >= 2]  # fmt: skip
        assert rise == (f"{max(worst):.3f}" if worst else "-"), (rise, worst)


def check_tests(text: str, kinds: dict, fisher: list, gain: list, interaction: list) -> int:
    """The Fisher, gain and interaction tables recomputed from the runs, one Bonferroni family
    over all of them; returns the family's size, which the page must state."""

    def learned(placement: str, lr: str, warmup: str) -> dict[int, float]:
        return {s: v for s, (k, v, _) in kinds[(placement, lr, warmup)].items() if k == "learned"}

    def pairs(placement: str, lr: str) -> dict[int, tuple[float, float]]:
        without, with_ = (learned(placement, lr, w) for w in WARMUPS)
        return {s: (without[s], with_[s]) for s in sorted(set(without) & set(with_))}

    samples = {("gain", p, lr): pairs(p, lr) for p, lr in product(PLACEMENTS, LRS)}
    for lr in LRS:
        pre, post = pairs("pre", lr), pairs("post", lr)
        samples[("interaction", lr)] = {s: (post[s][0] - post[s][1], pre[s][0] - pre[s][1])
                                        for s in sorted(set(pre) & set(post))}  # fmt: skip
    bad = {(p, lr, w): sum(k != "learned" for k, _, _ in kinds[(p, lr, w)].values())
           for p, lr, w in kinds}  # fmt: skip
    raw = {(p, lr): stats.fisher_exact([[bad[(p, lr, w)], len(SEEDS) - bad[(p, lr, w)]]
                                        for w in WARMUPS]).pvalue
           for p, lr in product(PLACEMENTS, LRS)}  # fmt: skip
    count = len(raw) + 2 * sum(len(s) >= 2 for s in samples.values())
    assert f"The page reports {count} p-values" in text
    assert [tuple(row[:2]) for row in fisher] == list(product(PLACEMENTS, LRS))
    for placement, lr, without, with_, p, corrected, said in fisher:
        assert (without, with_) == tuple(f"{bad[(placement, lr, w)]} of {len(SEEDS)}"
                                         for w in WARMUPS)  # fmt: skip
        assert float(p) == pytest.approx(raw[(placement, lr)], rel=6e-3)
        assert float(corrected) == pytest.approx(min(1.0, count * raw[(placement, lr)]), rel=6e-3)
        assert said == "not shown (corrected p >= 0.05)", "2 seeds: Fisher's p is at least 1/3"

    rows = {("gain", *row[:2]): row[2:] for row in gain}
    rows |= {("interaction", row[0]): row[1:] for row in interaction}
    assert set(rows) == set(samples)
    for key, sample in samples.items():
        found = [list(side) for side in zip(*sample.values(), strict=True)] or [[], []]
        expected = by_hand(*found, count) if len(sample) >= 2 else None
        check_cells(rows[key], expected, len(sample))
    answer = text.split("## What it shows\n\n")[1]
    yes = any(r[-1].startswith("different") and float(r[1].split()[0]) > 0 for r in interaction)
    assert answer.startswith("On these runs, yes" if yes else "These runs do not show"), answer
    return count
