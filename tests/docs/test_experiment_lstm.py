"""benchmarks/experiment_lstm.py: its paired tests on made-up numbers, and the script end to end
in quick mode: a learning-rate sweep per architecture on the selection seed, then an LSTM matched
in parameters to the tiny decoder, each at its chosen lr, two seeds each, compared paired by seed
at equal steps, at equal training time and in time per step, every number on the page read back
against the runs' own results.json and its statistics recomputed here with scipy."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import yaml
from scipy import stats

from helpers.experiment_scripts import benchmark_script, is_png, run_quick, tables

ARCHS = ("decoder", "rnn")
SEEDS = (1, 2)  # quick mode's
SECTIONS = ("Scope", "The two models", "Learning rate", "At equal steps and at equal time",
            "What it shows", "Machine and time")  # fmt: skip


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return benchmark_script("experiment_lstm")


def test_differences_are_paired_corrected_together_and_given_verdicts(script: ModuleType) -> None:
    seeds = (1, 2, 3)
    decoder = {1: 2.10, 2: 2.20, 3: 2.15}
    values = {
        "final": {"decoder": decoder, "rnn": {s: decoder[s] + 0.30 + 0.001 * s for s in seeds}},
        "at T": {"decoder": decoder, "rnn": {s: decoder[s] + 0.001 * (s - 2) for s in seeds}},
        "ms/step": {"decoder": {1: 50.0, 2: 60.0, 3: 55.0}, "rnn": {1: 51.0, 2: 58.0, 3: 58.0}},
    }
    tested = script.Tested(script.Measured(1.0, values))
    assert tested.count == 5 and tested.level == pytest.approx(1 - 0.05 / 5)
    assert tested.verdicts["final"] == "different"
    assert tested.verdicts["at T"] == "equivalent within ±0.05"
    assert tested.verdicts["ms/step"] == "no gap shown (interval holds 0)"
    # The shared seeds pair: a seed without a finite value on one side drops out.
    values["at T"]["rnn"][3] = math.nan
    assert script._pairs(values["at T"]) == ([2.099, 2.2], [2.10, 2.20])


def _interval(cell: str) -> tuple[float, float, float]:
    """'mean [low, high]' as three finite floats."""
    match = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell)
    assert match, cell
    values = tuple(float(x) for x in match.groups())
    assert all(math.isfinite(v) for v in values) and values[1] <= values[0] <= values[2], cell
    return values


def _loss_at(history: list[dict], seconds: float) -> float:
    times = [entry["time_s"] for entry in history]
    return float(np.interp(seconds, times, [e["val/loss"] for e in history], left=np.nan))


def _t_interval(values: list[float]) -> tuple[float, float]:
    if stats.sem(values) == 0:  # equal values (two seeds at one ms/step): the mean itself
        return np.mean(values), np.mean(values)
    return stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))


def _tost(lstm: list[float], decoder: list[float], margin: float) -> float:
    shifted = [(margin, "greater"), (-margin, "less")]
    return max(stats.ttest_rel([x + s for x in lstm], decoder, alternative=a).pvalue
               for s, a in shifted)  # fmt: skip


@pytest.mark.slow
def test_the_lstm_page_is_written_from_its_runs(tmp_path: Path, script: ModuleType) -> None:
    result = run_quick("experiment_lstm.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "lstm.md").read_text()
    assert "> Quick mode: a tiny model for a few steps" in page
    assert [s for s in SECTIONS if f"\n## {s}\n" not in page] == []
    assert f"\n**Tests:** {script.TESTS}\n" in page and "Welch" not in page
    chosen = _chosen(page, tmp_path / "runs", script)
    runs = {(arch, seed): _results(tmp_path / "runs" / f"{arch}-lr{chosen[arch]:g}-seed{seed}")
            for arch in ARCHS for seed in SEEDS}  # fmt: skip
    assert {r["status"] for r in runs.values()} == {"completed"}
    for arch in ARCHS:
        config = yaml.safe_load(
            (tmp_path / "runs" / f"{arch}-lr{chosen[arch]:g}-seed1" / "config.yaml").read_text()
        )
        assert config["optim"]["lr"] == pytest.approx(chosen[arch]) and config["seed"] == 1
        if arch == "rnn":
            assert (config["model"]["arch"], config["model"]["rnn_cell"]) == ("rnn", "lstm")
            assert (config["model"]["n_layers"], config["model"]["pos"]["name"]) == (2, "none")
            assert f"model.d_model={config['model']['d_model']}" in page

    # The same size: within 2%, the same count for every run of an architecture.
    counts = {arch: {r["n_parameters"] for (a, _), r in runs.items() if a == arch}
              for arch in ARCHS}  # fmt: skip
    assert all(len(c) == 1 for c in counts.values()), counts
    decoder, lstm = counts["decoder"].pop(), counts["rnn"].pop()
    assert abs(lstm / decoder - 1) <= 0.02, (decoder, lstm)
    [models] = tables(page, "model")
    assert [(row[0], int(row[3]), int(row[4])) for row in models] == [
        ("Transformer decoder", decoder, decoder), ("LSTM", lstm, lstm)]  # fmt: skip

    by_seed = _check_per_arch(page, runs, chosen)
    verdicts = _check_differences(page, by_seed, script.MARGIN)
    shows = page.split("\n## What it shows\n")[1].split("\n## Machine and time\n")[0]
    assert f"({decoder} parameters for the decoder, {lstm} for the LSTM" in shows
    assert "nan" not in shows.lower() and "no difference" not in shows.lower(), shows
    assert f"the decoder did best at peak lr {chosen['decoder']:g}" in shows
    # Each measure said as its verdict: a difference as one, else its equivalence verdict.
    words = {"d": "the LSTM's loss is", "e": "is shown to lie within", "i": "is inconclusive",
             "n": "no speed gap is claimed", "L": "the LSTM is", "-": "too few seeds"}  # fmt: skip
    for verdict in verdicts:
        assert words[verdict[0]] in shows, (verdict, shows)
    for name in ("lr", "by_step", "by_time"):
        assert is_png(tmp_path / "page" / "lstm" / f"{name}.png")
        assert f"](lstm/{name}.png)" in page


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _chosen(page: str, runs: Path, script: ModuleType) -> dict[str, float]:
    """The sweep table against its runs: each architecture at each lr on the selection seed; the
    lr chosen (bold, and in the last column) is the one of lowest final loss there."""
    assert script.SELECTION_SEED not in SEEDS
    sweep_table = tables(page, "arch")[0]
    assert [row[0] for row in sweep_table] == list(ARCHS)
    chosen = {}
    for arch, *cells, shown_lr in sweep_table:
        finals = {lr: _results(runs / f"{arch}-lr{lr:g}-seed{script.SELECTION_SEED}")["metrics"]
                  ["val/loss"] for lr in script.LRS}  # fmt: skip
        chosen[arch] = min(finals, key=finals.get)
        assert float(shown_lr) == chosen[arch], (arch, finals)
        for lr, cell in zip(script.LRS, cells, strict=True):
            assert float(cell.strip("*")) == pytest.approx(finals[lr], abs=6e-4), (arch, lr)
            assert cell.startswith("**") == (lr == chosen[arch]), (arch, lr, cell)
    return chosen


def _check_per_arch(page: str, runs: dict, chosen: dict) -> dict:
    """Per architecture: the final loss, the loss at T (T the shortest run's training time) and
    ms/step, each the mean of its runs' with a 95% t interval over seeds. Returns each measure's
    values per architecture, in seed order."""
    seconds = min(r["history"][-1]["time_s"] for r in runs.values())
    shown_t = float(re.search(r"the loss at T = (\d+\.\d) s, the shortest run", page).group(1))
    assert shown_t == pytest.approx(seconds, abs=0.051)
    measures = {
        "final": lambda r: r["metrics"]["val/loss"],
        "at T": lambda r: _loss_at(r["history"], seconds),
        "ms/step": lambda r: r["ms_per_step"],
    }
    by_seed = {m: {a: [read(runs[(a, s)]) for s in SEEDS] for a in ARCHS}
               for m, read in measures.items()}  # fmt: skip
    per_arch = tables(page, "arch")[1]
    assert [row[0] for row in per_arch] == list(ARCHS)
    for arch, lr, n, final, at_t, step, total, ms, ms_range in per_arch:
        assert (float(lr), n) == (chosen[arch], "2"), (arch, lr, n)
        totals = [runs[(arch, s)]["history"][-1]["time_s"] for s in SEEDS]
        # The column shows one decimal: T (the shortest run's time) is within its rounding.
        assert seconds <= float(total) + 0.051
        assert float(total) == pytest.approx(np.mean(totals), abs=0.051)
        assert 0 < float(step) <= 20, step
        for cell, name, tolerance in ((final, "final", 6e-4), (ms, "ms/step", 0.051)):
            values = by_seed[name][arch]
            low, high = _t_interval(values)
            assert _interval(cell) == pytest.approx((np.mean(values), low, high), abs=tolerance)
        ms_values = by_seed["ms/step"][arch]
        assert ms_range == f"{min(ms_values):.1f}-{max(ms_values):.1f}", ms_range
        read = [v for v in by_seed["at T"][arch] if v == v]  # those that had validated by T
        if read:
            assert float(at_t.split(" ")[0]) == pytest.approx(np.mean(read), abs=6e-4)
            assert at_t.endswith(f" ({len(read)} of 2 runs)") == (len(read) < 2), at_t
        else:
            assert at_t == "-", at_t
    return by_seed


def _check_differences(page: str, by_seed: dict, margin: float) -> list[str]:
    """The paired table, recomputed: each measure's LSTM-minus-decoder over the seeds both have
    a value for; every p-value (each t-test's, and TOST's for a loss) Bonferroni-corrected over
    all of them; each interval at 1 - 0.05 / m; the verdict from the corrected p-values."""
    [differences] = tables(page, "measure")
    names = {"val/loss at the last step": "final", "val/loss at T": "at T", "ms/step": "ms/step"}
    assert [row[0] for row in differences] == list(names)
    pairs, raw = {}, {}
    for label, name in names.items():
        kept = [(x, y) for x, y in zip(by_seed[name]["rnn"], by_seed[name]["decoder"],
                                       strict=True) if x == x and y == y]  # fmt: skip
        if len(kept) >= 2:
            pairs[label] = ([x for x, _ in kept], [y for _, y in kept])
            raw[label] = [stats.ttest_rel(*pairs[label]).pvalue]
            if name != "ms/step":
                raw[label].append(_tost(*pairs[label], margin))
    tested = sum(1 for ps in raw.values() for p in ps if p == p)
    level = 1 - 0.05 / tested
    assert f"{tested} p-values, Bonferroni-corrected together" in page
    assert f"interval at {level:.4f}" in page
    for label, n, delta, test, p, p_equivalent, verdict in differences:
        if label not in pairs:
            assert {delta, test, p, p_equivalent, verdict} == {"-"}, label
            continue
        lstm, decoder = pairs[label]
        assert (n, test) == (str(len(lstm)), f"paired (n={len(lstm)})"), label
        interval = stats.ttest_rel(lstm, decoder).confidence_interval(level)
        expected = (np.mean(np.subtract(lstm, decoder)), interval.low, interval.high)
        tolerance = 6e-3 if label == "ms/step" else 6e-4
        assert _interval_signed(delta) == pytest.approx(expected, abs=tolerance), label
        corrected = [min(1.0, tested * q) for q in raw[label]]
        assert float(p) == pytest.approx(corrected[0], rel=6e-3, abs=1e-12), label
        if label == "ms/step":
            holds = interval.low <= 0 <= interval.high
            assert p_equivalent == "-" and (verdict == "no gap shown (interval holds 0)") == holds
            continue
        assert float(p_equivalent) == pytest.approx(corrected[1], rel=6e-3, abs=1e-12), label
        different, equivalent = corrected[0] < 0.05, corrected[1] < 0.05
        within = f"within ±{margin:g}"
        expected_verdict = {(True, True): f"different, but {within}", (True, False): "different",
                            (False, True): f"equivalent {within}",
                            (False, False): "inconclusive (neither)"}  # fmt: skip
        assert verdict == expected_verdict[(different, equivalent)], label
    return [row[-1] for row in differences]


def _interval_signed(cell: str) -> tuple[float, float, float]:
    match = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cell)
    assert match, cell
    return tuple(float(x) for x in match.groups())
