"""benchmarks/activation_memory.py's quick path on CPU: size=tiny, a step with and without
model.activation_checkpointing; the table shows less kept for backward with it on and the same
loss. The figures at size=base (and CUDA's peak memory) need a full run."""

from __future__ import annotations

import re

from helpers import helpers_env
from helpers.experiment_scripts import run_benchmark

ROW = re.compile(r"^\| (false|true) \| ([\d.]+) \| (-|[\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", re.M)


def test_the_activation_memory_benchmark_prints_less_saved_and_the_same_loss() -> None:
    args = ["--quick", "--device=cpu"]
    result = run_benchmark("activation_memory.py", args, helpers_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        on: (float(saved), peak, loss) for on, saved, peak, _, loss in ROW.findall(result.stdout)
    }
    assert rows.keys() == {"false", "true"}, result.stdout
    assert rows["true"][0] < 0.5 * rows["false"][0], result.stdout
    assert rows["true"][1] == rows["false"][1] == "-", "no peak without CUDA"
    assert rows["true"][2] == rows["false"][2], result.stdout
    assert "same loss: True" in result.stdout
    assert result.stdout.startswith("size=tiny (arch=decoder,"), result.stdout
