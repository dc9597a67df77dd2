"""A GPU's peak FLOP/s, mfu's denominator, with no GPU: the device's name is faked, as Lightning
and xfmr read it. The dense datasheet figure, from Lightning's table or from xfmr's own rows
(`xfmr.training.peaks`) for the GPUs Lightning lacks or gives the sparse figure for, each with
its source; tf32's where float32 matmuls run in TF32; none, said once, for a GPU neither knows."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from xfmr.training.peaks import XFMR_PEAKS, xfmr_row
from xfmr.training.throughput import resolve_peak

CUDA = torch.device("cuda")  # only named: Lightning reads a GPU's name, which tests fake


def _gpu_named(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args, **kwargs: name)


@pytest.mark.parametrize(
    "name, precision, flops, label",
    [
        ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989.4e12, "bf16"),
        ("NVIDIA H100 80GB HBM3", "16-mixed", 989.4e12, "fp16"),
        ("NVIDIA H100 PCIe", "bf16-true", 756e12, "bf16"),
        ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312e12, "bf16"),
    ],
)
def test_a_gpu_lightning_knows_gets_its_datasheet_peak(
    monkeypatch: pytest.MonkeyPatch, name: str, precision: str, flops: float, label: str
) -> None:
    _gpu_named(monkeypatch, name)
    peak = resolve_peak(CUDA, precision, given_tflops=None, cache_dir=None)
    assert peak.flops == pytest.approx(flops)
    assert peak.source == f"datasheet: {name}, {label} (Lightning get_available_flops)"


@pytest.mark.parametrize(
    "name, flops",
    [
        ("NVIDIA H200", 989.4e12),  # Lightning: no match for the name, and 2.0e15 (sparse)
        ("NVIDIA H200 NVL", 835.5e12),  # Lightning: 1.7e15 (sparse), no match either
        ("NVIDIA H100 NVL", 835.5e12),  # Lightning: 1,978.8e12, a pair of boards' figure
        ("NVIDIA GH200 480GB", 989.4e12),  # Lightning: none
    ],
)
def test_a_gpu_in_xfmrs_table_gets_its_dense_peak_and_the_rows_source(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, flops: float
) -> None:
    _gpu_named(monkeypatch, name)
    with caplog.at_level(logging.WARNING):
        peak = resolve_peak(CUDA, "bf16-mixed", given_tflops=None, cache_dir=None)
    assert peak.flops == pytest.approx(flops)
    row = xfmr_row(name)
    assert peak.source == f"datasheet: {name}, bf16 ({row.source})"
    assert name.removeprefix("NVIDIA ").split()[0] in row.source and "datasheet" in row.source
    assert not caplog.records


def test_the_lightning_rows_xfmr_corrects_are_still_twice_the_dense_figure() -> None:
    """Should Lightning correct its table, the `corrects` notes (and rows) are to be revisited."""
    from lightning.fabric.utilities.throughput import _CUDA_FLOPS

    for chip, dense in (("h200 sxm1", 989.4e12), ("h200 nvl1", 835.5e12), ("h100 nvl", 989.4e12)):
        assert _CUDA_FLOPS[chip][torch.bfloat16] == pytest.approx(2 * dense, rel=0.02), chip
    assert all(row.corrects or "gh200" in row.contains for row in XFMR_PEAKS)


@pytest.mark.parametrize(
    "name, matmul_precision, flops, label",
    [
        ("NVIDIA H100 80GB HBM3", "high", 494.7e12, "tf32"),
        ("NVIDIA H100 80GB HBM3", "highest", 66.9e12, "fp32"),
        ("NVIDIA H200", "high", 494.7e12, "tf32"),
        ("NVIDIA H200", "highest", 67e12, "fp32"),
    ],
)
def test_a_float32_peak_is_tf32_where_matmuls_run_in_tf32(
    monkeypatch: pytest.MonkeyPatch, name: str, matmul_precision: str, flops: float, label: str
) -> None:
    _gpu_named(monkeypatch, name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))  # Hopper
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(matmul_precision)
    try:
        peak = resolve_peak(CUDA, "32-true", given_tflops=None, cache_dir=None)
    finally:
        torch.set_float32_matmul_precision(before)
    assert peak.flops == pytest.approx(flops)
    assert f", {label} (" in peak.source


@pytest.mark.parametrize(
    "name, precision",
    [("Imaginary GPU 9000", "bf16-mixed"), ("Tesla T4", "bf16-mixed")],  # T4: no bf16 figure
)
def test_a_gpu_without_a_datasheet_peak_has_none_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, precision: str
) -> None:
    _gpu_named(monkeypatch, name)
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_peak(CUDA, precision, given_tflops=None, cache_dir=None) is None
    assert not caught, [str(w.message) for w in caught]  # Lightning's own warning is ours
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert name in record.getMessage() and "throughput.peak_tflops" in record.getMessage()
