"""benchmarks/activation_memory.py's quick path on CPU: size=tiny, a step with and without
model.activation_checkpointing and objective.loss_chunk; the table shows less kept for backward
with either on and the same loss. The figures at size=base (and CUDA's peak memory) need a full
run."""

from __future__ import annotations

import re

from helpers import helpers_env
from helpers.experiment_scripts import run_benchmark

ROW = re.compile(
    r"^\| (false|true) \| (null|\d+) \| ([\d.]+) \| (-|[\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", re.M
)


def test_the_activation_memory_benchmark_prints_less_saved_and_the_same_loss() -> None:
    args = ["--quick", "--device=cpu"]
    result = run_benchmark("activation_memory.py", args, helpers_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        (on, chunk): (float(saved), peak, loss)
        for on, chunk, saved, peak, _, loss in ROW.findall(result.stdout)
    }
    assert rows.keys() == {(on, c) for on in ("false", "true") for c in ("null", "64")}
    saved = {setting: row[0] for setting, row in rows.items()}
    plain = saved[("false", "null")]
    assert saved[("true", "null")] < 0.5 * plain, result.stdout
    assert saved[("false", "64")] < plain, result.stdout  # no softmax of the whole logits
    assert saved[("true", "64")] < saved[("true", "null")], result.stdout
    assert {row[1] for row in rows.values()} == {"-"}, "no peak without CUDA"
    assert len({row[2] for row in rows.values()}) == 1, result.stdout
    assert "same loss: True" in result.stdout
    assert result.stdout.startswith("size=tiny (arch=decoder,"), result.stdout
