"""A GPU's datasheet peak FLOP/s, mfu's denominator: Lightning's table (`get_available_flops`),
and xfmr's own rows for the GPUs it lacks or gives the sparse figure for.

mfu divides by the dense figure, as torchtitan, llm.c and Megatron do. NVIDIA's datasheets
give Hopper's tensor-core figures with 2:4 structured sparsity, which doubles them ("* with
sparsity; specifications 1/2 lower without"): dense = sparse / 2. Lightning's table holds the
dense figure for the H100 SXM and PCIe, but the sparse one for the H200 (and keys its rows as
`h200 sxm1` / `h200 nvl1`, which `torch.cuda.get_device_name`'s "NVIDIA H200" never matches),
and for the H100 NVL the launch datasheet's figures for a pair of boards (1,978.8 bf16, twice
the SXM's 989.4). `XFMR_PEAKS` holds each such GPU's per-device dense figures, each row with
its source; a row that `corrects` Lightning's is read first, the others after Lightning's.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch

log = logging.getLogger("xfmr")


@dataclass(frozen=True)
class Peak:
    """One device's peak FLOP/s in a run's precision, the denominator of mfu, and where the
    figure comes from (results.json reports both)."""

    flops: float
    source: str


@dataclass(frozen=True)
class PeakRow:
    """One GPU's dense peak FLOP/s per matmul dtype (`datasheet_dtype`'s names).

    Args:
        contains: what the lowercased device name contains, all of it (as Lightning matches).
        excludes: what it must not contain (GH200, whose name contains "h200").
        flops: FLOP/s per dtype name, dense, one device.
        source: where the figures come from, as the peak's source names it.
        corrects: what Lightning's table gives this GPU, when its figure is the wrong one;
            empty where Lightning has no figure (the row is then read after Lightning's).
    """

    contains: tuple[str, ...]
    flops: Mapping[str, float]
    source: str
    excludes: tuple[str, ...] = ()
    corrects: str = ""

    def matches(self, name: str) -> bool:
        lowered = name.lower()
        return all(s in lowered for s in self.contains) and not any(
            s in lowered for s in self.excludes
        )


# Hopper at the SXM5 boost clock: the Hopper whitepaper's dense figures (Lightning's h100 sxm
# row), which the H200 SXM and GH200 datasheets give doubled for sparsity (1,979 bf16).
_HOPPER_SXM = {"float64": 33.5e12, "fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12}
# Hopper NVL boards (350-400 W): the H100 NVL and H200 NVL datasheets, per GPU, both
# FP64 30, FP32 60, TF32 835*, BF16/FP16 1,671* (* with sparsity).
_HOPPER_NVL = {"float64": 30e12, "fp32": 60e12, "tf32": 417.5e12, "bf16": 835.5e12}
_NVL_SOURCE = (
    "datasheet, per GPU: BF16/FP16 1,671 and TF32 835 TFLOP/s with sparsity, halved; FP32 60, "
    "FP64 30"
)

XFMR_PEAKS: tuple[PeakRow, ...] = (
    PeakRow(
        ("h200", "nvl"),
        {**_HOPPER_NVL, "fp16": _HOPPER_NVL["bf16"]},
        f"xfmr's table: NVIDIA H200 NVL {_NVL_SOURCE}",
        excludes=("gh200",),
        corrects="Lightning's h200 nvl1 row (1.7e15 bf16) is the sparse figure, and unmatched",
    ),
    PeakRow(
        ("h200",),
        {**_HOPPER_SXM, "float64": 34e12, "fp32": 67e12, "fp16": _HOPPER_SXM["bf16"]},
        "xfmr's table: NVIDIA H200 SXM datasheet: BF16/FP16 1,979 and TF32 989 TFLOP/s with "
        "sparsity, halved (the H100 SXM's 989.4 and 494.7, Hopper whitepaper); FP32 67, FP64 34",
        excludes=("gh200",),
        corrects="Lightning's h200 sxm1 row (2.0e15 bf16) is the sparse figure, and unmatched",
    ),
    PeakRow(
        ("h100", "nvl"),
        {**_HOPPER_NVL, "fp16": _HOPPER_NVL["bf16"]},
        f"xfmr's table: NVIDIA H100 NVL {_NVL_SOURCE}",
        corrects="Lightning's h100 nvl row (1,978.8e12 bf16) is a pair of boards' figure",
    ),
    PeakRow(
        ("gh200",),
        {**_HOPPER_SXM, "float64": 34e12, "fp32": 67e12, "fp16": _HOPPER_SXM["bf16"]},
        "xfmr's table: NVIDIA GH200 Grace Hopper datasheet, its H100 GPU: BF16/FP16 990 dense "
        "(1,979 with sparsity; the H100 SXM's 989.4, Hopper whitepaper), TF32 494.7, FP32 67",
    ),
)


def xfmr_row(name: str) -> PeakRow | None:
    """The first of `XFMR_PEAKS` whose name matches the device's; None if none does."""
    return next((row for row in XFMR_PEAKS if row.matches(name)), None)


def datasheet_dtype(device: torch.device, dtype: torch.dtype) -> str:
    """The name of the datasheet figure a matmul in `dtype` reaches, by Lightning's rule:
    float32 is tf32 where matmuls run in TF32 (Ampere and later, matmul precision not
    `highest`)."""
    short = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    if dtype is torch.float32 and torch.get_float32_matmul_precision() != "highest":
        # TF32 matmuls came with Ampere (compute capability 8), as Lightning's table reads it.
        if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
            return "tf32"
    return short.get(dtype, str(dtype).removeprefix("torch."))


def datasheet_peak(device: torch.device, dtype: torch.dtype) -> Peak | None:
    """This GPU's dense datasheet peak in `dtype` (float32: tf32's where matmuls run in tf32):
    xfmr's row where it corrects Lightning's, else Lightning's `get_available_flops`, else
    xfmr's row; None, with one warning, where neither knows one."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    label = datasheet_dtype(device, dtype)
    row = xfmr_row(name) if device.type == "cuda" else None
    if row is not None and row.corrects and label in row.flops:
        return Peak(row.flops[label], f"datasheet: {name}, {label} ({row.source})")
    flops, reason = _lightning_flops(device, dtype)
    if flops is not None:
        return Peak(float(flops), f"datasheet: {name}, {label} (Lightning get_available_flops)")
    if row is not None and label in row.flops:
        return Peak(row.flops[label], f"datasheet: {name}, {label} ({row.source})")
    log.warning(
        "no datasheet peak FLOP/s for %s in %s (Lightning's get_available_flops: %s), so no "
        "mfu; set throughput.peak_tflops to its dense peak TFLOP/s in %s for one",
        name,
        label,
        reason,
        label,
    )
    return None


def _lightning_flops(device: torch.device, dtype: torch.dtype) -> tuple[int | None, str]:
    """Lightning's figure, and its reason where it has none (it warns on its own for an
    unknown chip or dtype; that warning goes into xfmr's)."""
    from lightning.fabric.utilities.throughput import get_available_flops

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flops = get_available_flops(device, dtype)
    return flops, "; ".join(str(w.message) for w in caught) or "no figure"
