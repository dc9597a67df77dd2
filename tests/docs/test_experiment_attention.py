"""benchmarks/experiment_attention.py: its word-start measure against the previous-token
baseline, on maps built by hand; and end to end in quick mode: two seeds, every head drawn and
measured with intervals beside the baselines, the counts across seeds agreeing with the
per-seed tables."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from helpers.experiment_scripts import benchmark_script, is_png, run_quick, tables

# xfmr-attention's labels for "ab cd efg\nhi": ␣ a space, \n a newline
LABELS = ["a", "b", "␣", "c", "d", "␣", "e", "f", "g", "\\n", "h", "i"]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return benchmark_script("experiment_attention")


def _measured(script: ModuleType, weights: torch.Tensor) -> dict[str, float]:
    [row] = script.measure(weights[None], LABELS)
    return dict(zip(script.COLUMNS, row.tolist(), strict=True))


def _previous_only(length: int) -> torch.Tensor:
    weights = torch.zeros(length, length)
    weights[0, 0] = 1.0
    weights[torch.arange(1, length), torch.arange(length - 1)] = 1.0
    return weights


def test_previous_token_attention_scores_nothing_above_baseline_on_word_start(script) -> None:
    found = _measured(script, _previous_only(len(LABELS)))
    assert found["previous"] == 1.0
    assert found["word_start"] == 0.0 and found["by_distance"] == 0.0
    # Over every query, as the old measure counted, it lands on the space after each space.
    assert found["word_start_all"] > 0.1


def test_word_start_counts_only_queries_whose_previous_token_is_not_a_space(script) -> None:
    length = len(LABELS)
    weights = torch.eye(length)  # every query on itself...
    for t in range(1, length):
        if LABELS[t - 1] in script.SPACES:  # ...but right after a space, on that space
            weights[t] = 0.0
            weights[t, t - 1] = 1.0
    found = _measured(script, weights)
    assert found["word_start"] == 0.0 and found["word_start_all"] > 0.0


def test_a_word_start_head_clears_its_distance_baseline(script) -> None:
    length = len(LABELS)
    weights = torch.zeros(length, length)
    latest = 0  # before any space: the first token
    for t in range(length):
        weights[t, latest] = 1.0
        latest = t if LABELS[t] in script.SPACES else latest
    found = _measured(script, weights)
    assert found["word_start"] == 1.0
    assert found["word_start"] - found["by_distance"] > 0.5


def _cell(text: str) -> float:
    return float(text.split(" ± ")[0])


@pytest.mark.slow
def test_the_attention_page_measures_every_head(tmp_path: Path) -> None:
    result = run_quick("experiment_attention.py", tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "page" / "attention.md").read_text()
    assert "Quick mode" in page and "## What it shows" in page and "## Scope" in page
    seeds = tables(page, "head")
    assert len(seeds) == 2  # quick mode: two seeds
    names = ["block 0 head 0", "block 0 head 1", "block 1 head 0", "block 1 head 1"]
    measures = "self|previous token|first token|word start|same character"
    labelled: list[list[str]] = []
    for rows in seeds:
        assert [row[0] for row in rows] == [*names, "even attention", "previous token only"]
        assert all(re.fullmatch(r"-?\d+\.\d{3}(?: ± \d+\.\d{3})?", c) for r in rows for c in r[2:])
        values = {row[0]: [_cell(c) for c in row[2:]] for row in rows}
        self_, previous, first, word, by_distance, _, distance, _ = values["even attention"]
        # Even over t + 1 keys, averaged over queries t = 1..15: (H_16 - 1) / 15 on each of them.
        harmonic = sum(1 / (t + 1) for t in range(1, 16)) / 15
        assert self_ == previous == first == pytest.approx(harmonic, abs=1e-3)
        assert distance == pytest.approx(sum(t / 2 for t in range(1, 16)) / 15, abs=1e-3)
        only = values["previous token only"]
        assert only[1] == 1.0 and only[3] == 0.0 and only[4] == 0.0  # previous, word start
        for row in rows[:4]:
            assert re.fullmatch(rf"(?:(?:{measures}), )*(?:local|mid-range|broad)", row[1]), row
            labelled.append(row[1].split(", "))
            head = values[row[0]]
            lifts = {"self": head[0] - self_, "previous token": head[1] - previous,
                     "first token": head[2] - first, "word start": head[3] - head[4]}  # fmt: skip
            for name, lift in lifts.items():  # named only where the lift's interval clears 0.1
                assert name not in row[1] or lift >= 0.1 - 1e-3, (row, name)
    [counts] = tables(page, "reads as")
    for row in counts[:-1]:  # each kind's heads per seed, as the seed tables label them
        per_seed = [sum(row[0] in kinds for kinds in labelled[i * 4 : i * 4 + 4]) for i in (0, 1)]
        assert [int(v) for v in row[1:3]] == per_seed, row
    [blocks] = tables(page, "block")
    assert [row[0] for row in blocks] == ["block 0", "block 1", *["even attention",
                                          "previous token only"]]  # fmt: skip
    assert is_png(tmp_path / "page" / "attention" / "heads.png")
    assert is_png(tmp_path / "page" / "attention" / "word_start.png")
