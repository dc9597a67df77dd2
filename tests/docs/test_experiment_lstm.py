"""benchmarks/experiment_lstm.py end to end in quick mode: an LSTM matched in parameters to the
tiny decoder, two seeds each, compared at equal steps and at equal training time, every number
on the page read back against the runs' own results.json."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers.experiment_scripts import is_png, run_quick, tables

RUNS = ("decoder-seed1", "rnn-seed1", "decoder-seed2", "rnn-seed2")
SECTIONS = ("The two models", "At equal steps", "At equal training time", "What it shows",
            "Machine and time")  # fmt: skip


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


@pytest.mark.slow
def test_the_lstm_page_is_written_from_its_runs(tmp_path: Path) -> None:
    result = run_quick("experiment_lstm.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "lstm.md").read_text()
    assert "> Quick mode: a tiny model for a few steps" in page
    assert [s for s in SECTIONS if f"\n## {s}\n" not in page] == []
    results = {name: json.loads((tmp_path / "runs" / name / "results.json").read_text())
               for name in RUNS}  # fmt: skip
    assert {r["status"] for r in results.values()} == {"completed"}
    config = yaml.safe_load((tmp_path / "runs" / "rnn-seed1" / "config.yaml").read_text())
    assert (config["model"]["arch"], config["model"]["rnn_cell"]) == ("rnn", "lstm")
    assert (config["model"]["n_layers"], config["model"]["pos"]["name"]) == (2, "none")

    # The same size: within 2%, the same count for every seed, as the page says.
    counts = {arch: {r["n_parameters"] for n, r in results.items() if n.startswith(arch)}
              for arch in ("decoder", "rnn")}  # fmt: skip
    assert all(len(c) == 1 for c in counts.values()), counts
    decoder, lstm = counts["decoder"].pop(), counts["rnn"].pop()
    assert abs(lstm / decoder - 1) <= 0.02, (decoder, lstm)
    [models] = tables(page, "model")
    assert [(row[0], int(row[3]), int(row[4])) for row in models] == [
        ("Transformer decoder", decoder, decoder), ("LSTM", lstm, lstm)]  # fmt: skip
    assert f"model.d_model={config['model']['d_model']}" in page

    # At equal steps: each architecture's mean is that of its runs' final val/loss.
    steps_table, time_table = tables(page, "arch")
    final = {arch: [r["metrics"]["val/loss"] for n, r in results.items() if n.startswith(arch)]
             for arch in ("decoder", "rnn")}  # fmt: skip
    for arch, n, loss, *_ in steps_table:
        assert n == "2", (arch, n)
        assert _interval(loss)[0] == pytest.approx(sum(final[arch]) / 2, abs=6e-4), arch

    # At equal time: T is the shortest run's training time, within every run's; each loss cell
    # is the mean of the runs' histories interpolated at T, where they had validated by then.
    totals = {name: r["history"][-1]["time_s"] for name, r in results.items()}
    seconds = min(totals.values())
    shown_t = float(re.search(r"\nT = (\d+\.\d) s, the shortest run", page).group(1))
    assert shown_t == pytest.approx(seconds, abs=0.051)
    rows = {row[0]: row for row in time_table}
    assert set(rows) == {"decoder", "rnn"}
    for arch, row in rows.items():
        own = [name for name in RUNS if name.startswith(arch)]
        mean_total = sum(totals[name] for name in own) / 2
        assert seconds <= mean_total and float(row[2]) == pytest.approx(mean_total, abs=0.051)
        mean_ms = sum(results[name]["ms_per_step"] for name in own) / 2
        assert float(row[3]) == pytest.approx(mean_ms, abs=0.051), arch
        assert 0 < float(row[4]) <= 20, row
        read = [v for v in (_loss_at(results[name]["history"], seconds) for name in own) if v == v]
        if read:
            shown = float(row[5].split(" [")[0])
            assert math.isfinite(shown) and shown == pytest.approx(sum(read) / len(read), abs=2e-3)
        else:
            assert row[5] == "-", row

    shows = page.split("\n## What it shows\n")[1]
    assert f"({decoder} parameters for the decoder, {lstm} for the LSTM" in shows
    assert "nan" not in shows.lower(), shows
    for name in ("by_step", "by_time"):
        assert is_png(tmp_path / "page" / "lstm" / f"{name}.png")
        assert f"](lstm/{name}.png)" in page
