"""The Python blocks of README ("From Python") and docs/python.md ("A tour") run as written, only
shorter: each is read from its page by its id, and each of its trainings cut to four steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.docs import block

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


def run_block(block_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The block, its trainings shortened, run in `tmp_path`: the names it defined."""
    import matplotlib

    matplotlib.use("Agg")
    code = block(block_id)
    assert code.count(LONG) == 2, "the test shortens each training"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XFMR_CACHE_DIR", str(tmp_path / ".cache"))
    namespace: dict = {}
    exec(compile(code.replace(LONG, SHORT), block_id, "exec"), namespace)
    return namespace


def test_the_tour_trains_compares_generates_draws_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(block("python-tour").strip().splitlines()) <= 12, "about ten lines"
    namespace = run_block("python-tour", tmp_path, monkeypatch)
    learned, rotary = namespace["learned"], namespace["rotary"]
    assert learned.status == rotary.status == "completed"
    assert learned.path == tmp_path / "runs" / "learned"
    assert (learned.path / "model.safetensors").is_file()
    assert (learned.path / "train.log").is_file()


def test_the_readme_block_trains_compares_and_generates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert len(block("readme-python").strip().splitlines()) <= 8, "README's is the short one"
    namespace = run_block("readme-python", tmp_path, monkeypatch)
    learned, rotary = namespace["learned"], namespace["rotary"]
    assert learned.status == rotary.status == "completed"
    printed = capsys.readouterr().out
    assert "pos" in printed and "rotary" in printed, printed  # the table names what differs
    assert "runs/rotary" in printed and "runs/learned" in printed, printed  # a row per run
    assert "the cat" in printed, printed
    assert any(line.startswith("the cat") for line in printed.splitlines()), printed
