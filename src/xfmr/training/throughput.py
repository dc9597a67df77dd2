"""Model FLOPs utilisation: the FLOPs a training step needs, the device's peak, and their ratio.

MFU = tokens/s x FLOPs per token / peak FLOP/s (Chowdhery et al. 2022, PaLM, appendix B). The
FLOPs are the model's, not the hardware's: recomputation, padding and elementwise work add none.
The peak is a GPU's dense datasheet figure, the one torchtitan, llm.c, Megatron and Lightning
divide by (`xfmr.training.peaks`), or a CPU's measured one (`resolve_peak`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from xfmr.files import atomic_write_text
from xfmr.nn.attention import CrossAttention
from xfmr.nn.config import ModelConfig
from xfmr.training.peaks import Peak, datasheet_peak

# Lightning's precision names -> the dtype matmuls run in (mixed: the autocast dtype).
PRECISION_DTYPES = {
    "64": torch.float64,
    "64-true": torch.float64,
    "32": torch.float32,
    "32-true": torch.float32,
    "bf16": torch.bfloat16,
    "bf16-mixed": torch.bfloat16,
    "bf16-true": torch.bfloat16,
    "16": torch.float16,
    "16-mixed": torch.float16,
    "16-true": torch.float16,
}
PEAK_CACHE_FILE = "peak_flops.json"
log = logging.getLogger("xfmr")
# Architectures with a FLOPs estimate; an RNN's mfu is reported as null.
COVERED_ARCHS = ("decoder", "encoder", "encoder_decoder")


def weight_parameters(model: nn.Module, within: nn.Module | None = None) -> int:
    """N: the parameters of `within` (default: all of `model`) that multiply activations.

    nanoGPT's convention (`GPT.get_num_params(non_embedding=True)`): every parameter counts,
    norm gains and biases too, except embedding tables read by lookup (positions, segments, a
    relative bias, an untied token embedding). A token embedding tied to the output layer counts
    once, as that layer's matrix. Tied tensors count once.
    """
    in_linear = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)} - in_linear
    params = (within or model).parameters()  # each tensor once
    return sum(p.numel() for p in params if id(p) not in lookups)


@dataclass(frozen=True)
class TrainingFlops:
    """FLOPs of one forward + backward pass, from the model's parameter counts and shape.

    Each weight costs 6 FLOPs per token it multiplies (2 forward, 4 backward), and attention
    12 * d_model per query per key per layer (QK^T and AV, 2 FLOPs per multiply-add, times 3
    for the backward): nanoGPT's `6N + 12*L*H*Q*T` per token for a decoder, with the full
    T x T score matrix counted even where a causal mask skips half of it (as nanoGPT and PaLM
    do), or a sliding window (`model.window`) most of it: xfmr's windows are dense masks, so
    the scores are all computed. An encoder is counted the same way. For an encoder-decoder with S source and T target
    tokens: the encoder's N over S tokens, the decoder's over T (cross-attention's key/value
    projections over S), self-attention over S^2 and T^2, cross-attention over T*S.

    Build it with `TrainingFlops.of(model)`; None for an RNN (not covered: its mfu is null).
    """

    arch: str
    d_model: int
    n_layers: int  # the encoder's for encoder_decoder
    n_decoder_layers: int
    weights: int  # N over the tokens of `input_ids`; encoder_decoder: the decoder's, over T
    source_weights: int = 0  # encoder_decoder: N over the source tokens (encoder, cross k/v)

    @classmethod
    def of(cls, model: nn.Module, config: ModelConfig | None = None) -> TrainingFlops | None:
        config = config or getattr(model, "config", None)
        if config is None or config.arch not in COVERED_ARCHS:
            return None
        total = weight_parameters(model)
        source = 0
        if config.arch == "encoder_decoder":
            embeddings = {
                id(m.weight) for m in model.encoder.modules() if isinstance(m, nn.Embedding)
            }
            source = sum(p.numel() for p in model.encoder.parameters() if id(p) not in embeddings)
            source += sum(
                p.numel()
                for m in model.decoder.modules()
                if isinstance(m, CrossAttention)
                for p in m.kv.parameters()
            )
        return cls(
            arch=config.arch,
            d_model=config.d_model,
            n_layers=config.n_layers,
            n_decoder_layers=config.n_decoder_layers,
            weights=total - source,
            source_weights=source,
        )

    def per_sequence(self, length: int, target_length: int | None = None) -> float:
        """FLOPs of one sequence of `length` tokens (an encoder-decoder's source), and for an
        encoder-decoder `target_length` decoder tokens."""
        attention = 12 * self.d_model  # per query, per key, per layer
        if self.arch != "encoder_decoder":
            return 6 * self.weights * length + attention * self.n_layers * length * length
        if target_length is None:
            raise ValueError("an encoder-decoder's FLOPs need the target length")
        S, T = length, target_length
        return (
            6 * self.source_weights * S
            + 6 * self.weights * T
            + attention * self.n_layers * S * S
            + attention * self.n_decoder_layers * (T * T + T * S)
        )

    def per_token(self, length: int, target_length: int | None = None) -> float:
        """FLOPs per token of `input_ids` (the source's, for an encoder-decoder), the tokens
        a run's tokens/s counts."""
        return self.per_sequence(length, target_length) / length

    def per_batch_token(self, batch: Mapping[str, torch.Tensor]) -> float:
        """`per_token` at the lengths of a training batch (`input_ids`, `decoder_input_ids`)."""
        target = batch.get("decoder_input_ids")
        return self.per_token(
            int(batch["input_ids"].shape[-1]),
            None if target is None else int(target.shape[-1]),
        )


def mfu(
    tokens_per_s: float | None,
    flops_per_token: float | None,
    peak_flops: float | None,
    *,
    world_size: int = 1,
) -> float | None:
    """Achieved over peak FLOP/s; `peak_flops` is one device's, `tokens_per_s` all devices'."""
    if not tokens_per_s or not flops_per_token or not peak_flops:
        return None
    return tokens_per_s * flops_per_token / (peak_flops * world_size)


def precision_dtype(precision: str | int) -> torch.dtype | None:
    """The dtype matmuls run in under a Lightning `trainer.precision`; None if not known."""
    return PRECISION_DTYPES.get(str(precision))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        return f"{cpu_model()}, {torch.get_num_threads()} threads"
    return device.type


# CPU instructions that multiply bf16 in hardware; without them torch emulates bf16 matmuls
# (0.9 GFLOP/s against 120 for fp32 on an AVX2-only EPYC), and a measured bf16 peak says nothing.
BF16_MATMUL_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_flags() -> tuple[str, ...] | None:
    """Which of BF16_MATMUL_FLAGS this CPU has; None where /proc/cpuinfo cannot tell."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = set()
    for line in info.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return tuple(f for f in BF16_MATMUL_FLAGS if f in flags)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# The products a peak is measured with: square matmuls large enough to fill the device, many
# back to back so that launches and the two synchronisations vanish in the timing. One 2048^3
# product between two synchronisations read 309-369 TFLOP/s on an H100 where back-to-back 8192^3
# products read 792-798 (datasheet: 989), and overstated mfu 2.1-2.6x. On a 2-core EPYC 1024^3
# products reach 90-97% of 2048^3 ones (140 against 145-157 GFLOP/s) in an eighth of the work.
GPU_MATMUL = (8192, 20)  # size, products per timing
CPU_MATMUL = (1024, 8)
WARMUP_PRODUCTS = 2  # the first products pay for allocation, kernel selection and clock ramp-up


def matmul_shape(
    device: torch.device, size: int | None = None, count: int | None = None
) -> tuple[int, int]:
    """The matrix size and the products per timing `matmul_flops` uses on `device`."""
    default_size, default_count = CPU_MATMUL if device.type == "cpu" else GPU_MATMUL
    return size or default_size, count or default_count


def matmul_method(
    device: torch.device, dtype: torch.dtype, size: int | None = None, count: int | None = None
) -> str:
    """How `matmul_flops` measures: a peak's source and its cache key both name it, so a
    figure measured another way is measured again, not reused."""
    size, count = matmul_shape(device, size, count)
    return f"{size}^3 {str(dtype).removeprefix('torch.')} matmuls x {count}, back to back"


def matmul_flops(
    device: torch.device,
    dtype: torch.dtype,
    *,
    size: int | None = None,
    count: int | None = None,
    repeats: int = 3,
) -> float:
    """FLOP/s of `count` size x size matmuls in `dtype` on `device`, queued back to back and
    timed together, the best of `repeats` timings after a warm-up.

    Defaults: `GPU_MATMUL` on an accelerator, `CPU_MATMUL` on a CPU. CUDA is timed between
    events on its stream; elsewhere between synchronisations (a CPU's products are synchronous).
    """
    size, count = matmul_shape(device, size, count)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    out = torch.empty(size, size, device=device, dtype=dtype)
    with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
        for _ in range(WARMUP_PRODUCTS):
            torch.mm(a, b, out=out)
        best = min(_time_products(a, b, out, count) for _ in range(repeats))
    return 2 * size**3 * count / best


def _time_products(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, count: int) -> float:
    """Seconds that `count` products `a @ b` take, queued one after another."""
    if a.device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    _synchronize(a.device)
    started = time.perf_counter()
    for _ in range(count):
        torch.mm(a, b, out=out)
    _synchronize(a.device)
    return time.perf_counter() - started


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measured_peak_flops(
    device: torch.device,
    dtype: torch.dtype,
    *,
    cache_dir: str | Path | None,
    size: int | None = None,
    count: int | None = None,
    repeats: int = 3,
    max_load: float | None = None,
) -> float:
    """`matmul_flops` of the device in `dtype`, measured once per device (CPU: and thread
    count), dtype and `matmul_method`, and kept in `cache_dir/peak_flops.json`.

    A CPU busy with other work gives a low peak, and so a high mfu: when the 1-minute load
    average exceeds `max_load` (default: the number of cores) the figure serves this run only,
    is not cached, and a warning says so.
    """
    key = f"{device_name(device)} | {matmul_method(device, dtype, size, count)}"
    cache = Path(cache_dir) / PEAK_CACHE_FILE if cache_dir else None
    known = _read_cache(cache)
    if key in known:
        return float(known[key])
    max_load = max_load if max_load is not None else os.cpu_count() or 1
    busy = device.type == "cpu" and _cpu_load() > max_load
    peak = matmul_flops(device, dtype, size=size, count=count, repeats=repeats)
    if busy:
        log.warning(
            "peak FLOP/s measured on a busy CPU (load %.1f on %d cores): %.0f GFLOP/s is low and "
            "mfu high; not cached. Set throughput.peak_tflops for a fixed figure",
            _cpu_load(),
            os.cpu_count() or 1,
            peak / 1e9,
        )
    if cache is not None and not busy:
        known = {**_read_cache(cache), key: peak}  # another run may have added its own
        atomic_write_text(cache, json.dumps(known, indent=2, sort_keys=True) + "\n")
    return peak


def resolve_peak(
    device: torch.device,
    precision: str | int,
    *,
    given_tflops: float | None,
    cache_dir: str | Path | None,
) -> Peak | None:
    """One device's peak FLOP/s for a run in Lightning's `precision` on `device`, logged in one
    line; None where there is none to trust (mfu is then not reported).

    `given_tflops` (throughput.peak_tflops) wins. A GPU's is the datasheet's dense figure for
    the precision's matmul dtype, as torchtitan, llm.c and Megatron divide by, from Lightning's
    `get_available_flops` or xfmr's own rows (`xfmr.training.peaks`); a GPU neither knows has
    none. A CPU's (or another device's) is measured (`measured_peak_flops`), cached in
    `cache_dir`.
    """
    if given_tflops is not None:
        peak = Peak(float(given_tflops) * 1e12, "throughput.peak_tflops")
    elif (dtype := precision_dtype(precision)) is None:
        log.info(
            "no peak FLOP/s for trainer.precision=%s, so no mfu; set throughput.peak_tflops "
            "for one",
            precision,
        )
        return None
    elif device.type in ("cuda", "xla"):
        peak = datasheet_peak(device, dtype)
    else:
        peak = measured_peak(device, dtype, cache_dir=cache_dir)
    if peak is not None:
        log.info("mfu peak: %.4g TFLOP/s per device (%s)", peak.flops / 1e12, peak.source)
    return peak


def measured_peak(
    device: torch.device, dtype: torch.dtype, *, cache_dir: str | Path | None
) -> Peak:
    """`measured_peak_flops` in the run's dtype, or in float32 on a CPU that emulates bf16 (no
    `BF16_MATMUL_FLAGS`): the figure its hardware reaches, where an emulated one (1 GFLOP/s in
    bf16 against 140 in float32 on an AVX2 EPYC) would call a slow run efficient, and take
    minutes to measure."""
    emulated = device.type == "cpu" and dtype is torch.bfloat16 and cpu_bf16_flags() == ()
    measured = torch.float32 if emulated else dtype
    flops = measured_peak_flops(device, measured, cache_dir=cache_dir)
    source = f"measured: {matmul_method(device, measured)}, {device_name(device)}"
    if emulated:
        source += "; this CPU emulates bfloat16 matmuls"
    return Peak(flops, source)


def _cpu_load() -> float:
    """Runnable processes over the last minute, on average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _read_cache(cache: Path | None) -> dict[str, float]:
    if cache is None or not cache.is_file():
        return {}
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):  # a damaged cache is measured again, not fatal
        return {}
    return known if isinstance(known, dict) else {}
