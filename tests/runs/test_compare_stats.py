"""`xfmr-compare`'s statistics on run directories the tests write: the 95% t interval of each
setting's mean, the difference to a --baseline (paired over shared seeds, else Welch's) with
its Holm-corrected p-value, equivalence and seeds to detect a difference, which parameters
mattered (Optuna's fANOVA and PED-ANOVA), and curves drawn a colour per setting. Every figure
is checked against scipy or Optuna run on the runs' own results.json files."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers.cli import compare_cli as compare
from helpers.cli import compare_json as as_json

BASELINE = "learned"
# Three seeds a setting (1, 2, 3), so rotary and alibi pair with the baseline seed by seed;
# rotary clearly better, alibi indistinguishable, sinusoidal with one finished run (its others
# failed), none with two (seed 3 missing: Welch's test).
FINALS = {
    "learned": [2.390, 2.401, 2.384],
    "rotary": [2.171, 2.178, 2.166],
    "alibi": [2.392, 2.380, 2.399],
    "none": [2.60, 2.62],
    "sinusoidal": [2.41],
}


def write_run(
    root: Path, job: int, overrides: list[str], final: float | None, status: str = "completed"
) -> None:
    history = [] if final is None else [
        {"step": step, "val/loss": final + 1.0 / step} for step in (10, 20, 30)
    ]  # fmt: skip
    results = {
        "status": status,
        "metrics": {} if final is None else {"val/loss": final},
        "step": 30,
        "history": history,
        "overrides": overrides,
        "optimized_metric": "val/loss",
        **({"reason": "killed by SIGKILL"} if status == "failed" else {}),
    }
    (root / str(job)).mkdir(parents=True)
    (root / str(job) / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stats") / "sweep"
    job = 0
    for pos, finals in FINALS.items():
        for seed, final in enumerate(finals, start=1):
            write_run(root, job, [f"pos={pos}", f"seed={seed}"], final)
            job += 1
    write_run(root, job, ["pos=sinusoidal", "seed=2"], None, status="failed")
    return root


def finals_of(sweep: Path, pos: str) -> list[float]:
    """The final val/loss of the setting's completed runs, read back from their files."""
    return list(seeded_finals(sweep, pos).values())


def seeded_finals(sweep: Path, pos: str) -> dict[str, float]:
    """Seed to the final val/loss of the setting's completed runs, read back from their files."""
    values = {}
    for path in sorted(sweep.glob("*/results.json")):
        results = json.loads(path.read_text())
        if f"pos={pos}" in results["overrides"] and results["status"] == "completed":
            seed = next(o.split("=")[1] for o in results["overrides"] if o.startswith("seed="))
            values[seed] = results["metrics"]["val/loss"]
    return values


def holm_reference(p_values: list[float]) -> list[float]:
    """Holm 1979 by its definition: p_(i) times the number of hypotheses not yet rejected,
    made monotone."""
    order = np.argsort(p_values)
    m = len(p_values)
    scaled = [min(1.0, (m - rank) * p_values[index]) for rank, index in enumerate(order)]
    adjusted = np.maximum.accumulate(scaled)
    result = [0.0] * m
    for rank, index in enumerate(order):
        result[index] = adjusted[rank]
    return result


def test_interval_difference_and_corrected_p_value_equal_scipy(sweep: Path) -> None:
    table = as_json([sweep, "--baseline", f"pos={BASELINE}"], sweep.parent)
    rows = {row["pos"]: row for row in table["rows"]}
    assert "95% CI (t)" in table["title"] and "Welch" in table["title"]
    assert "paired" in table["title"] and "d_z" in table["title"]
    assert "Holm" in table["title"] and "pos=learned" in table["title"]
    baseline = seeded_finals(sweep, BASELINE)
    tested = {}
    for pos, row in rows.items():
        values = finals_of(sweep, pos)
        assert row["n"] == len(values)
        low, high = row["final val/loss 95% CI (t) low"], row["final val/loss 95% CI (t) high"]
        if len(values) < 2:
            assert low is high is None and "no std or CI" in row["note"]
            assert row["p (t-test)"] is None and "no test" in row["note"]
            continue
        expected = stats.t.interval(0.95, len(values) - 1, np.mean(values), stats.sem(values))
        assert (low, high) == pytest.approx(expected, rel=1e-12)
        if pos == BASELINE:
            assert row["significant"] == "baseline" and row["Δ vs baseline"] is None
            continue
        seeded, theirs = seeded_finals(sweep, pos), list(baseline.values())
        if set(baseline) <= set(seeded):  # every seed of the baseline ran here
            mine = [seeded[s] for s in baseline]
            test = stats.ttest_rel(mine, theirs)
            differences = np.subtract(mine, theirs)
            assert row["test"] == f"paired (n={len(baseline)})"
            assert row["Δ vs baseline"] == pytest.approx(differences.mean())
            effect = differences.mean() / differences.std(ddof=1)
        else:
            test = stats.ttest_ind(values, theirs, equal_var=False)
            assert row["test"] == "Welch"
            assert row["Δ vs baseline"] == pytest.approx(np.mean(values) - np.mean(theirs))
            sums = [(len(v) - 1) * np.var(v, ddof=1) for v in (values, theirs)]
            pooled = np.sqrt(sum(sums) / (len(values) + len(theirs) - 2))
            effect = (np.mean(values) - np.mean(theirs)) / pooled
        interval = test.confidence_interval(0.95)
        assert row["Δ 95% CI low"] == pytest.approx(interval.low, rel=1e-12)
        assert row["Δ 95% CI high"] == pytest.approx(interval.high, rel=1e-12)
        assert row["p (t-test)"] == pytest.approx(test.pvalue, rel=1e-12)
        assert row["effect size (d or d_z)"] == pytest.approx(effect, rel=1e-12)
        tested[pos] = test.pvalue
    assert sorted(tested) == ["alibi", "none", "rotary"]
    assert rows["rotary"]["test"] == rows["alibi"]["test"] == "paired (n=3)"
    assert rows["none"]["test"] == "Welch"
    for pos, corrected in zip(tested, holm_reference(list(tested.values())), strict=True):
        assert rows[pos]["p (Holm)"] == pytest.approx(corrected, rel=1e-12)
        assert rows[pos]["significant"] == ("yes" if corrected < 0.05 else "no")
    assert rows["rotary"]["significant"] == "yes" and rows["alibi"]["significant"] == "no"


def test_holm_against_a_worked_example() -> None:
    from xfmr.runs.compare.stats import holm

    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, then 0.04*1 lifted to 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.02, 0.9]) == pytest.approx([0.04, 0.9])
    corrected = holm([float("nan"), 0.01])  # a test with no spread: NaN, and not counted in m
    assert np.isnan(corrected[0]) and corrected[1] == pytest.approx(0.01)


def test_the_stats_columns_reach_csv_markdown_and_the_terminal(sweep: Path) -> None:
    args = [sweep, "--baseline", f"pos={BASELINE}"]
    header = compare([*args, "--format", "csv"], sweep.parent).stdout.splitlines()[0].split(",")
    markdown = compare([*args, "--format", "markdown"], sweep.parent).stdout
    md_header = next(line for line in markdown.splitlines() if line.startswith("| pos"))
    assert [c.strip() for c in md_header.strip("|").split("|")] == header
    for column in ("final val/loss 95% CI (t) low", "p (Holm)", "Δ 95% CI high", "test"):
        assert column in header
    shown = compare(args, sweep.parent).stdout
    assert "95% CI (t)" in shown and "baseline" in shown and "no test" in shown


def tost_by_hand(values: list[float], baseline: list[float], margin: float, pair: bool) -> float:
    """Schuirmann's two one-sided tests from their definition, with scipy.stats.t."""
    if pair:
        differences = np.subtract(values, baseline)
        delta, df = differences.mean(), len(differences) - 1
        se = differences.std(ddof=1) / np.sqrt(len(differences))
    else:
        v1, v2 = np.var(values, ddof=1) / len(values), np.var(baseline, ddof=1) / len(baseline)
        delta, se = np.mean(values) - np.mean(baseline), np.sqrt(v1 + v2)
        df = (v1 + v2) ** 2 / (v1**2 / (len(values) - 1) + v2**2 / (len(baseline) - 1))
    return max(stats.t.sf((delta + margin) / se, df), stats.t.cdf((delta - margin) / se, df))


def test_equivalence_and_seeds_to_detect_reach_every_format(sweep: Path, tmp_path: Path) -> None:
    args = [sweep, "--baseline", f"pos={BASELINE}", "--equivalence", "0.1", "--detect", "0.01"]
    table = as_json(args, sweep.parent)
    rows = {row["pos"]: row for row in table["rows"]}
    assert "TOST" in table["title"] and "noncentral t" in table["title"]
    baseline = seeded_finals(sweep, BASELINE)
    tost = {}
    for pos in ("rotary", "alibi", "none"):
        seeded, pair = seeded_finals(sweep, pos), pos != "none"
        values = [seeded[s] for s in baseline] if pair else list(seeded.values())
        tost[pos] = tost_by_hand(values, list(baseline.values()), 0.1, pair)
        assert rows[pos]["p (TOST ±0.1)"] == pytest.approx(tost[pos], rel=1e-9)
        spread = rows[pos]["sd for power"]
        if pair:
            assert spread == pytest.approx(
                np.std(np.subtract(values, list(baseline.values())), ddof=1)
            )
        needed = rows[pos]["seeds to detect 0.01"]
        assert isinstance(needed, int) and needed >= 2
        df = needed - 1 if pair else 2 * needed - 2
        shift = 0.01 / spread * np.sqrt(needed if pair else needed / 2)
        critical = stats.t.ppf(0.975, df)
        assert stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift) >= 0.8
    for pos, corrected in zip(tost, holm_reference(list(tost.values())), strict=True):
        assert rows[pos]["p (TOST Holm)"] == pytest.approx(corrected, rel=1e-9)
    verdicts = {pos: rows[pos]["equivalence (±0.1)"] for pos in rows}
    assert verdicts == {
        "rotary": "different",
        "alibi": "equivalent within ±0.1",
        "none": "different",
        "learned": None,
        "sinusoidal": None,
    }
    added = ["p (TOST ±0.1)", "p (TOST Holm)", "equivalence (±0.1)", "seeds to detect 0.01"]
    header = compare([*args, "--format", "csv"], sweep.parent).stdout.splitlines()[0].split(",")
    markdown = compare([*args, "--format", "markdown"], sweep.parent).stdout
    shown = compare(args, sweep.parent).stdout
    page = tmp_path / "page.html"
    assert compare([*args, "--html", page], sweep.parent).returncode == 0
    html = page.read_text(encoding="utf-8")
    for column in added:
        assert column in header and f"| {column} |" in markdown and f"<th>{column}</th>" in html
    # The terminal's 100 characters hold the verdict; the tests' workings are in the others.
    assert "equivalent within ±0.1" in shown and "paired (n=3)" not in shown
    assert "paired (n=3)" in markdown and "Not shown here: " in shown
    assert "equivalent within ±0.1" in html and "paired (n=3)" in html


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--baseline", "pos=rope"], "--baseline pos=rope: matches no setting; the settings are: "),
        (["--baseline", "lr=1"], "--baseline lr=1: give KEY=VALUE with KEY among the grouping"),
        (["--baseline", "pos=learned", "--no-group"], "--baseline pos=learned: compares settings"),
        (["--equivalence", "0.01"], "--equivalence 0.01: asks about each setting against a base"),
        (["--baseline", "pos=learned", "--detect", "0"], "--detect 0: give a positive number"),
        (["--detect", "tiny"], "argument --detect: invalid float value: 'tiny'"),
    ],
)
def test_a_bad_baseline_is_one_line_naming_the_valid_settings(
    sweep: Path, args: list[str], expected: str
) -> None:
    result = compare([sweep, *args], sweep.parent)
    assert result.returncode == 2, result.output
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"xfmr-compare: error: {expected}"), result.stderr
    if "no setting" in expected:
        assert all(f"pos={pos}" in result.stderr for pos in FINALS)


def grid(root: Path, runs: int) -> Path:
    """pos x optim.lr x seed: pos decides the loss, the learning rate barely."""
    rng = random.Random(0)
    job = 0
    for pos, level in (("learned", 2.4), ("rotary", 2.2), ("alibi", 2.25)):
        for lr in ("1e-3", "3e-3"):
            for seed in (1, 2):
                if job < runs:
                    final = level + (0.002 if lr == "3e-3" else 0.0) + rng.gauss(0, 0.005)
                    write_run(root, job, [f"pos={pos}", f"optim.lr={lr}", f"seed={seed}"], final)
                job += 1
    return root


def importance_of(study) -> dict[str, dict[str, float]]:
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator

    return {
        "fANOVA": optuna.importance.get_param_importances(
            study, evaluator=FanovaImportanceEvaluator(seed=0)
        ),
        "PED-ANOVA": optuna.importance.get_param_importances(
            study, evaluator=PedAnovaImportanceEvaluator()
        ),
    }


def importance_rows(markdown: str) -> dict[str, list[float]]:
    section = markdown.split("Which parameters mattered", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]
    return {row[0]: [float(value) for value in row[1:]] for row in cells}


def test_a_grids_importance_equals_optunas_on_its_runs(tmp_path: Path) -> None:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    root = grid(tmp_path / "grid", 12)
    shown = compare([root, "--format", "markdown"], tmp_path)
    assert shown.returncode == 0, shown.output
    assert "12 finished runs, from the finished runs as Optuna trials" in shown.stdout
    distributions = {
        "pos": CategoricalDistribution(["alibi", "learned", "rotary"]),
        "optim.lr": FloatDistribution(1e-3, 3e-3),
    }
    study = optuna.create_study(direction="minimize")
    # In the order xfmr-compare reads them (jobs by number): fANOVA's forest depends on it.
    for path in sorted(root.glob("*/results.json"), key=lambda p: int(p.parent.name)):
        results = json.loads(path.read_text())
        params = dict(o.split("=", 1) for o in results["overrides"] if not o.startswith("seed"))
        params["optim.lr"] = float(params["optim.lr"])
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=distributions, value=results["metrics"]["val/loss"]
            )
        )
    expected = importance_of(study)
    rows = importance_rows(shown.stdout)
    assert list(rows) == ["pos", "optim.lr"], "most important first"
    for name, (fanova, ped_anova) in rows.items():
        assert fanova == pytest.approx(expected["fANOVA"][name], rel=1e-3, abs=1e-4)
        assert ped_anova == pytest.approx(expected["PED-ANOVA"][name], rel=1e-3, abs=1e-4)


def test_too_few_finished_runs_say_so(tmp_path: Path) -> None:
    shown = compare([grid(tmp_path / "grid", 10), "--format", "markdown"], tmp_path)
    assert shown.returncode == 0, shown.output
    assert "not computed: 10 finished runs; importance needs at least 11" in shown.stdout
    assert "| parameter |" not in shown.stdout


def test_a_searchs_importance_comes_from_its_stored_study(tmp_path: Path) -> None:
    """The study in the sweep's journal, not the runs: here the two differ on purpose."""
    import optuna

    from xfmr.run_dir.files import JOURNAL_FILE
    from xfmr.sweeps.search import open_storage

    root = grid(tmp_path / "search", 12)
    storage = str(root / JOURNAL_FILE)
    study = optuna.create_study(study_name="lr_search", storage=open_storage(storage))
    rng = random.Random(1)

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("optim.lr", 1e-4, 1e-2, log=True)
        decay = trial.suggest_float("optim.weight_decay", 0.0, 0.2)
        return (np.log10(lr) + 3) ** 2 + 0.01 * decay + rng.gauss(0, 0.001)

    study.optimize(objective, n_trials=14)
    sweep = {"kind": "search", "optimized_metric": "val/loss", "direction": "minimize",
             "study_name": "lr_search", "storage": "/elsewhere/optuna.journal"}  # fmt: skip
    (root / "sweep.json").write_text(json.dumps(sweep))
    shown = compare([root, "--format", "markdown"], tmp_path)
    assert shown.returncode == 0, shown.output
    assert "14 finished runs, from the Optuna study 'lr_search'" in shown.stdout
    expected = importance_of(
        optuna.load_study(study_name="lr_search", storage=open_storage(storage))
    )
    rows = importance_rows(shown.stdout)
    assert set(rows) == {"optim.lr", "optim.weight_decay"}
    for name, (fanova, ped_anova) in rows.items():
        assert fanova == pytest.approx(expected["fANOVA"][name], rel=1e-3, abs=1e-4)
        assert ped_anova == pytest.approx(expected["PED-ANOVA"][name], rel=1e-3, abs=1e-4)


def test_curves_gather_a_setting_in_one_colour_with_its_mean(sweep: Path) -> None:
    from xfmr.runs.compare.figures import metric_curves
    from xfmr.runs.compare.runs import find_runs

    runs = find_runs([sweep])
    settings = metric_curves(runs, "val/loss", ["pos"])
    assert [s.label for s in settings] == [f"pos={pos}" for pos in FINALS]
    assert len({s.colour for s in settings}) == len(settings)
    for curves in settings:
        finals = finals_of(sweep, curves.label.split("=")[1])
        assert len(curves.runs) == len(finals)
        assert curves.mean[-1] == pytest.approx(np.mean(finals) + 1 / 30)
        last_std = curves.std[-1]
        assert (
            last_std is None
            if len(finals) < 2
            else last_std == pytest.approx(np.std(finals, ddof=1))
        )
    twelve = metric_curves(runs, "val/loss", None)  # a colour per run: never two alike
    assert len(twelve) == 12 and len({s.colour for s in twelve}) == 12


def plotted(html: str, div: str) -> list[dict]:
    """The traces the page hands plotly for the element `div`."""
    start = re.search(rf'Plotly\.newPlot\(\s*"{div}",\s*', html)
    assert start, f"no plot {div}"
    return json.JSONDecoder().raw_decode(html, start.end())[0]


def test_the_page_has_no_seed_axis_and_a_curve_per_setting(tmp_path: Path) -> None:
    root = grid(tmp_path / "grid", 12)
    page, png = tmp_path / "page.html", tmp_path / "curves.png"
    result = compare([root, "--html", page, "--plot", png], tmp_path)
    assert result.returncode == 0, result.output
    html = page.read_text(encoding="utf-8")
    figures = {div: plotted(html, div) for div in ("curves", "parallel", "importance")}
    labels = [d["label"] for d in figures["parallel"][0]["dimensions"]]
    assert labels == ["pos", "optim.lr", "final val/loss"]
    means = [t for t in figures["curves"] if t.get("showlegend") is not False]
    assert len(means) == 6 and len({t["line"]["color"] for t in means}) == 6
    assert {t["name"].split(" (")[0] for t in figures["importance"]} == {"fANOVA", "PED-ANOVA"}
    assert png.stat().st_size > 10_000
