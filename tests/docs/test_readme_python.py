"""README's "From Python" block runs as written, only shorter: taken from README itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import ROOT

README = ROOT / "README.md"
LONG = '"trainer.max_steps=200"'
# Four steps, validated twice, no closing sample and no peak-FLOPs measurement.
SHORT = ", ".join(
    f'"{o}"'
    for o in (
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=2",
        "trainer.num_sanity_val_steps=0",
        "data.n_sentences=400",
        "callbacks.text_sample=null",
        "callbacks.progress_bar=null",
        "throughput.peak_tflops=1",
    )
)


def from_python_block() -> str:
    section = README.read_text().split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return block


def test_the_readme_block_trains_compares_generates_draws_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    block = from_python_block()
    assert block.count(LONG) == 2, "the test shortens each training"
    assert len(block.strip().splitlines()) <= 12, "about ten lines"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XFMR_CACHE_DIR", str(tmp_path / ".cache"))
    namespace: dict = {}
    exec(compile(block.replace(LONG, SHORT), str(README), "exec"), namespace)
    learned, rotary = namespace["learned"], namespace["rotary"]
    assert learned.status == rotary.status == "completed"
    assert learned.path == tmp_path / "runs" / "learned"
    assert (learned.path / "model.safetensors").is_file()
    assert (learned.path / "train.log").is_file()
