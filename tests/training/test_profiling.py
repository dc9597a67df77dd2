"""Where a step's time goes: a recorded CUDA trace whose every group's share is known by hand
(kernels charged to the operators that launched them, annotations adding nothing), a real CPU
trace of a tiny model's steps, and the callback in a short run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from helpers.config import compose_config
from xfmr.training.profiling import (
    ProfileSteps,
    attribute,
    format_profile,
    load_trace,
    summarise_trace,
)

pytestmark = pytest.mark.usefixtures("one_thread")

CPU, MAIN, AUTOGRAD = 4242, 4242, 4250  # the process, its main thread, autograd's device thread
GPU, STREAM = 0, 7


def _span(cat: str, name: str, ts: float, dur: float, *, gpu: bool = False, **args) -> dict:
    pid, tid = (GPU, STREAM) if gpu else (CPU, args.pop("tid", MAIN))
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _op(name: str, ts: float, dur: float, **args) -> dict:
    return _span("cpu_op", name, ts, dur, **args)


def _launch(name: str, ts: float, correlation: int, *, cat: str = "cuda_runtime", **args) -> dict:
    return _span(cat, name, ts, 2, correlation=correlation, **args)


def _kernel(name: str, ts: float, dur: float, correlation: int, cat: str = "kernel") -> dict:
    return _span(cat, name, ts, dur, gpu=True, correlation=correlation, stream=STREAM)


NVJET = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"
CUDNN_SDPA_BPROP = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wg_128x64x128_4x1x1_kernel0_0"
FUSED_ADAMW = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<5>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
    "<float, 5, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, "
    "bool const*, float const*>(...)"
)
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>(...)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>"
LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"

# One step of a recorded CUDA trace, in microseconds. GPU time per group, by hand:
#   matmul     500 = nvjet under aten::addmm 400 + an xmma GEMM, launch unrecorded, 100
#   attention  250 = cuDNN's SDPA backward 200 + a fill inside that op 10 + an fmha kernel,
#                    launch unrecorded, 40
#   optimizer  120 = the fused AdamW kernel under aten::_fused_adamw_
#   copies      50 = a host-to-device memcpy under aten::copy_
#   norms       50 = layer norm under aten::native_layer_norm
#   other       30 = an add under aten::add_, which names no group
# 1000 in all; the step annotations (CPU 0..2000, GPU 0..2000), `## forward ##` and
# Optimizer.step, and Python's own frames add nothing.
CUDA_STEP = [
    _span("user_annotation", "ProfilerStep#7", 0, 2000),
    _span("gpu_user_annotation", "ProfilerStep#7", 0, 2000, gpu=True),
    _span("user_annotation", "## forward ##", 10, 400),
    _span("python_function", "nn.Module: Linear_0", 15, 60),
    _op("aten::linear", 20, 50),
    _op("aten::t", 21, 2),
    _op("aten::addmm", 25, 40),
    _launch("cudaLaunchKernel", 30, correlation=1),
    _op("aten::add_", 70, 10),  # starts as aten::linear ends: its sibling, not its child
    _launch("cudaLaunchKernel", 72, correlation=2),
    _op("aten::layer_norm", 100, 30),
    _op("aten::native_layer_norm", 102, 26),
    _launch("cudaLaunchKernel", 110, correlation=3),
    _op("aten::to", 200, 40),
    _op("aten::_to_copy", 201, 38),
    _op("aten::copy_", 205, 30),
    _launch("cudaMemcpyAsync", 210, correlation=4),
    _op("autograd::engine::evaluate_function: ScaledDotProductCudnnAttentionBackward0", 500, 100,
        tid=AUTOGRAD),
    _op("ScaledDotProductCudnnAttentionBackward0", 502, 96, tid=AUTOGRAD),
    _op("aten::_scaled_dot_product_cudnn_attention_backward", 504, 92, tid=AUTOGRAD),
    _op("aten::_cudnn_attention_backward", 506, 88, tid=AUTOGRAD),
    _op("aten::zeros", 508, 20, tid=AUTOGRAD),
    _op("aten::fill_", 510, 10, tid=AUTOGRAD),
    _launch("cudaLaunchKernel", 512, correlation=5, tid=AUTOGRAD),
    _launch("cuLaunchKernelEx", 540, correlation=6, cat="cuda_driver", tid=AUTOGRAD),
    _span("user_annotation", "Optimizer.step#AdamW.step", 800, 200),
    _op("aten::_fused_adamw_", 810, 50),
    _launch("cudaLaunchKernel", 820, correlation=7),
    _kernel(NVJET, 40, 400, correlation=1),
    _kernel(ADD, 440, 30, correlation=2),
    _kernel(LAYER_NORM, 470, 50, correlation=3),
    _kernel("Memcpy HtoD (Pageable -> Device)", 520, 50, correlation=4, cat="gpu_memcpy"),
    _kernel(FILL, 570, 10, correlation=5),
    _kernel(CUDNN_SDPA_BPROP, 580, 200, correlation=6),
    _kernel(FUSED_ADAMW, 830, 120, correlation=7),
    _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 1000, 100, 90),
    _kernel("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", 1100, 40, correlation=91),
]  # fmt: skip


def test_a_cuda_step_charges_each_kernel_to_the_operator_that_launched_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": CUDA_STEP}))
    profile = summarise_trace(load_trace(path))
    assert profile.device == "cuda" and profile.steps == 1
    assert profile.groups == {
        "matmul": 500,
        "attention": 250,
        "optimizer": 120,
        "copies / casts": 50,
        "norms": 50,
        "other": 30,
    }
    device_work = ("kernel", "gpu_memcpy", "gpu_memset")
    assert profile.total_us == sum(e["dur"] for e in CUDA_STEP if e["cat"] in device_work)
    assert profile.operators[("aten::addmm", "matmul")] == 400
    assert profile.operators[("aten::_cudnn_attention_backward", "attention")] == 210
    assert profile.operators[("aten::_fused_adamw_", "optimizer")] == 120
    assert profile.operators[("aten::copy_", "copies / casts")] == 50
    assert profile.operators[("aten::add_", "other")] == 30
    labels = {operator for operator, _ in profile.operators}
    assert not labels & {"ProfilerStep#7", "## forward ##", "Optimizer.step#AdamW.step"}
    table = format_profile(profile)
    assert "1 step profiled: 1.00 ms/step of GPU kernel time" in table
    assert "| matmul | 0.50 | 50.0% |" in table and "| attention | 0.25 | 25.0% |" in table
    assert "| total | 1.00 | 100.0% |" in table


@pytest.mark.parametrize(
    ("operators", "kernel", "expected"),
    [
        # An SDPA backend's own matmuls are attention's (the math backend).
        (["aten::_scaled_dot_product_attention_math", "aten::bmm"], "ampere_sgemm_128x64_nn",
         ("attention", "aten::_scaled_dot_product_attention_math")),
        # The innermost operator that names a group, inside one that does not.
        (["aten::linear", "aten::matmul", "aten::mm"], NVJET, ("matmul", "aten::mm")),
        # A composite norm's parts count as the norm.
        (["aten::rms_norm", "aten::pow"], "elementwise_kernel", ("norms", "aten::rms_norm")),
        # An autograd node counts as the operator it differentiates.
        (["autograd::engine::evaluate_function: NativeLayerNormBackward0"], None,
         ("norms", "autograd::engine::evaluate_function: NativeLayerNormBackward0")),
        (["EmbeddingBackward0", "aten::embedding_backward"], None,
         ("embedding", "aten::embedding_backward")),
        # No operator: the kernel's name, the kernel's short name as the label.
        ([], "void flash::flash_bwd_dq_dk_dv_loop_kernel<Flash_bwd_kernel_traits<128>>(...)",
         ("attention", "flash::flash_bwd_dq_dk_dv_loop_kernel")),
        ([], "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64>(...)",
         ("matmul", "cutlass::Kernel2")),
        (["aten::fill_"], "elementwise_kernel", ("other", "aten::fill_")),
    ],
)  # fmt: skip
def test_attribution_rules(operators: list[str], kernel: str | None, expected: tuple) -> None:
    assert attribute(operators, kernel) == expected


def _top_level_time(events: list[dict]) -> float:
    """The operators' time, counted without the summariser: per thread, each operator that
    starts after the previous top-level one ended."""
    total = 0.0
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    for thread in {(e["pid"], e["tid"]) for e in ops}:
        end = float("-inf")
        for op in sorted((e for e in ops if (e["pid"], e["tid"]) == thread),
                         key=lambda e: (e["ts"], -e["dur"])):  # fmt: skip
            if op["ts"] >= end:
                total, end = total + op["dur"], op["ts"] + op["dur"]
    return total


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(32, 16)
        self.norm = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.embedding(ids))  # (B, T, C)
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)  # (B, 1, T, C) each
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1)
        return self.out(F.gelu(y))


def test_a_cpu_trace_charges_the_top_level_operators_time_and_no_annotation(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = _Tiny()
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    ids = torch.randint(0, 32, (2, 8))
    path = tmp_path / "cpu.json"
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda profiler: profiler.export_chrome_trace(str(path)),
    ) as profiler:
        for _ in range(3):
            with torch.profiler.record_function("## forward ##"):
                logits = model(ids)
            F.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
            optimizer.step()
            optimizer.zero_grad()
            profiler.step()
    events = load_trace(path)
    profile = summarise_trace(events)
    assert profile.device == "cpu" and profile.steps == 2
    assert profile.total_us == pytest.approx(_top_level_time(events), rel=1e-9)
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert steps and profile.total_us < sum(e["dur"] for e in steps)
    for group in ("matmul", "attention", "norms", "softmax / loss", "activation", "embedding",
                  "optimizer"):  # fmt: skip
        assert profile.groups.get(group, 0) > 0, (group, profile.groups)
    labels = {operator for operator, _ in profile.operators}
    assert not any(label.startswith(("ProfilerStep", "##", "Optimizer.")) for label in labels)


def test_the_callback_prints_where_a_training_step_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from xfmr.training.run import run_training

    trace = tmp_path / "profile" / "trace.json"
    cfg = compose_config(
        tmp_path,
        [
            "size=tiny",
            "trainer.max_steps=4",
            "trainer.val_check_interval=4",
            "callbacks.text_sample=null",
            "callbacks.model_checkpoint=null",
            "+callbacks.profile._target_=xfmr.training.profiling.ProfileSteps",
            "+callbacks.profile.skip=1",
            "+callbacks.profile.steps=2",
            f"+callbacks.profile.trace_path={trace}",
            "compile=false",  # eager steps on a GPU too, where auto would replay CUDA graphs
        ],
    )
    run_training(cfg)
    out = capsys.readouterr().out
    counted = "GPU kernel time" if torch.cuda.is_available() else "CPU time in operators"
    assert "2 steps profiled: " in out and f"ms/step of {counted}" in out, out
    assert "| where | ms/step | share |" in out and "| total |" in out and "| 100.0% |" in out
    assert "| matmul |" in out and "| aten::" in out, out
    assert summarise_trace(load_trace(trace)).steps == 2


def test_the_callback_refuses_no_steps() -> None:
    with pytest.raises(ValueError, match="steps=0"):
        ProfileSteps(steps=0)
