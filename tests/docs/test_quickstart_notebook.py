"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient, ipykernel)
and shows what it says it shows: a step bar, the validation curves, the comparison table,
generated text and an attention map. The committed notebook carries no outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import ROOT

NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
SRC = ROOT / "src"
STEPS = 6


def test_the_committed_notebook_has_no_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def _outputs(cell) -> tuple[str, set[str]]:
    """A cell's printed text (streams and plain-text results) and its output mime types."""
    text, kinds = [], set()
    for output in cell.outputs:
        if output.output_type == "stream":
            text.append(output.text)
            kinds.add(output.name)
        else:
            data = output.get("data", {})
            kinds.update(data)
            text.append(data.get("text/plain", ""))
    return "".join(text), kinds


def _cell(notebook, needle: str):
    [cell] = [c for c in notebook.cells if c.cell_type == "code" and needle in c.source]
    return cell


def test_quickstart_notebook_runs_in_a_jupyter_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.manager import KernelManager

    # The kernel inherits this environment: xfmr from this checkout, a short run, no GPU.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("XFMR_QUICKSTART_STEPS", str(STEPS))
    monkeypatch.setenv("XFMR_CACHE_DIR", str(tmp_path / ".cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    manager = KernelManager(kernel_name="python3", ip="127.0.0.1")
    client = nbclient.NotebookClient(
        notebook,
        km=manager,
        timeout=120,
        startup_timeout=60,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()

    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
    trained, kinds = _outputs(_cell(notebook, "learned = xfmr.train("))
    assert f"{STEPS}/{STEPS}" in trained, "the step bar reaches the last step"
    assert "status=completed" in trained
    assert "image/png" in _outputs(_cell(notebook, 'learned.history["val/loss"].plot('))[1]
    table, kinds = _outputs(_cell(notebook, "xfmr.compare(learned, rotary)"))
    assert "text/html" in kinds and "pos" in table and "rotary" in table
    assert "image/png" in _outputs(_cell(notebook, "curves.plot("))[1]
    generated, _ = _outputs(_cell(notebook, "best.generate("))
    assert generated.strip(), "some text was generated"
    drawn, kinds = _outputs(_cell(notebook, "best.attention("))
    assert "image/png" in kinds and "maps:" in drawn
    assert len(list(tmp_path.glob("outputs/train/runs/*/results.json"))) == 2
