"""Where a training step's time goes: torch.profiler's Chrome trace, summarised by what the time
was spent on (attention, matmuls, norms, the optimizer, ...), and a callback that profiles a few
steps of any run:

    xfmr-train ... +callbacks.profile._target_=xfmr.training.profiling.ProfileSteps \\
        +callbacks.profile.steps=5

On a GPU the time is the kernels': each kernel (and each device memcpy / memset) is charged to the
operator whose CPU-side launch it came from, found through the launch's correlation id. Summing
the profiler's own per-name averages instead adds annotations (`ProfilerStep#N` spans the whole
step) to the kernels inside them, and kernels are named after their libraries (`nvjet_...`,
`cudnn_generated_...`), not after the operator that needed them.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

# The trace's categories (kineto's ActivityType names). Every other category (user_annotation,
# gpu_user_annotation, python_function, cuda_sync, ...) marks a span or a wait, not work, and
# is never added to a total.
OPERATOR = "cpu_op"
LAUNCHES = frozenset({"cuda_runtime", "cuda_driver"})  # cudaLaunchKernel, cuLaunchKernel, ...
KERNEL = "kernel"
DEVICE_COPIES = frozenset({"gpu_memcpy", "gpu_memset"})
STEP_ANNOTATION = re.compile(r"ProfilerStep#\d+")
# An autograd node, `AddmmBackward0` (inside `autograd::engine::evaluate_function: ...`).
BACKWARD_NODE = re.compile(r"(?:autograd::engine::evaluate_function: )?([A-Za-z0-9]+)Backward\d*")

COPIES = "copies / casts"
OTHER = "other"

# Every SDPA backend (math, flash, memory-efficient, cuDNN) and its backward. Whatever such an
# operator launches is attention's, the math backend's own matmuls and softmax included.
ATTENTION_OPERATORS = re.compile(
    r"scaled_?dot_?product|flash_?attention|efficient_?attention|cudnn_?attention", re.IGNORECASE
)
# group -> the operator names it covers (re.search, any case), attention's aside; gradient
# clipping is the optimizer's through its `_foreach_norm` and `_foreach_mul_`.
OPERATOR_GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (group, re.compile(pattern, re.IGNORECASE))
    for group, pattern in (
        ("optimizer", r"^aten::_foreach_|^aten::_fused_(adam|adamw|sgd|adagrad)_?$"),
        ("matmul", r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_addmm_activation"
                   r"|_scaled_mm|_int_mm|mv|addmv|dot)$"),
        ("norms", r"layer_?norm|rms_?norm|group_?norm|batch_?norm"),
        ("softmax / loss", r"softmax|cross_entropy|nll_loss|mse_loss"),
        ("activation", r"^aten::(gelu|silu|relu|tanh|sigmoid|glu|elu|leaky_relu|mish)"
                       r"(_backward)?_?$|^aten::threshold_backward$"),
        ("embedding", r"embedding"),
        (COPIES, r"^aten::(copy_|_?to_copy|to|contiguous|clone|cat|stack|_copy_from"
                 r"|_copy_from_and_resize)$"),
    )
)  # fmt: skip

# group -> kernel names it covers, for a kernel no operator explains. Attention first, as
# attention kernels are built on CUTLASS (`flash::...`, `fmha_cutlassF_...`).
KERNEL_GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (group, re.compile(pattern, re.IGNORECASE))
    for group, pattern in (
        ("attention", r"sdpa|flash|fmha|attention"),
        ("matmul", r"nvjet|cublas|cutlass|gemm|gemv|xmma"),
        ("optimizer", r"adam|multi_tensor_apply|foreach"),
        ("norms", r"layer_?norm|rms_?norm|group_?norm|batch_?norm"),
        ("softmax / loss", r"softmax|cross_entropy|nll_loss"),
        ("activation", r"gelu|silu|relu|glu"),
        ("embedding", r"embedding"),
        (COPIES, r"copy|memcpy|memset"),
    )
)


def attribute(operators: list[str], kernel: str | None = None) -> tuple[str, str]:
    """The group a piece of work belongs to and the operator it is charged to.

    `operators` are the operators around the work, outermost first (the launch of a kernel, or
    an operator's own CPU time). The rule, first that applies:
    1. any attention operator among them: "attention", charged to the innermost one (an SDPA
       backend's own matmuls, softmax and copies are the attention's cost);
    2. the innermost operator whose name says a group (`aten::addmm` inside `aten::linear`;
       `aten::rms_norm` around the `aten::pow` it is made of; an autograd node such as
       `AddmmBackward0` as the operator it differentiates);
    3. the kernel's name (`nvjet_...`, `cudnn_..._sdpa_...`), where no operator says anything
       or none launched it;
    4. "other".
    The work is charged to the operator that decided, else the innermost one, else the kernel.
    """
    attention = [name for name in operators if _matches(ATTENTION_OPERATORS, name)]
    if attention:
        return "attention", attention[-1]
    for name in reversed(operators):
        group = _first_group(OPERATOR_GROUPS, _differentiated(name))
        if group is not None:
            return group, name
    label = operators[-1] if operators else _short_kernel_name(kernel or "")
    group = _first_group(KERNEL_GROUPS, kernel) if kernel else None
    return group or OTHER, label


def _differentiated(name: str) -> str:
    """An autograd node's name as the operator it differentiates (`AddmmBackward0` ->
    `aten::addmm`), so that a backward counts where its forward does; other names unchanged."""
    node = BACKWARD_NODE.fullmatch(name)
    if node is None:
        return name
    return "aten::" + re.sub(r"(?<!^)(?=[A-Z])", "_", node[1]).lower()


def _matches(pattern: re.Pattern[str], name: str) -> bool:
    return pattern.search(name) is not None


def _first_group(groups: tuple[tuple[str, re.Pattern[str]], ...], name: str) -> str | None:
    return next((group for group, pattern in groups if _matches(pattern, name)), None)


def _short_kernel_name(kernel: str) -> str:
    """`void at::native::elementwise_kernel<128, 4, ...>(...)` -> `at::native::elementwise_kernel`:
    one label for every instantiation of a template."""
    return kernel.removeprefix("void ").split("<", 1)[0].split("(", 1)[0][:80]


@dataclass(frozen=True)
class StepProfile:
    """Where the profiled steps' time went.

    Attributes:
        device: "cuda": GPU kernel time (summed over streams, so it may exceed the wall time when
            streams overlap); "cpu": CPU time inside operators (no GPU in the trace).
        steps: the profiled steps (`ProfilerStep#N` spans in the trace; 1 if there are none).
        groups: group -> microseconds over all steps; they sum to the total.
        operators: (operator, group) -> microseconds over all steps.
    """

    device: str
    steps: int
    groups: dict[str, float]
    operators: dict[tuple[str, str], float]

    @property
    def total_us(self) -> float:
        return sum(self.groups.values())

    def ms_per_step(self, micros: float) -> float:
        return micros / self.steps / 1000.0


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of a trace `torch.profiler.profile.export_chrome_trace` wrote (.json or
    .json.gz)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def summarise_trace(events: Iterable[dict[str, Any]]) -> StepProfile:
    """Where the time of the steps in a profiler's Chrome trace went, by group and operator.

    With GPU kernels in the trace, each kernel's time (memcpy and memset included, always
    "copies / casts") goes to the operators around the CPU-side launch whose `correlation`
    matches it; without, each operator's self CPU time goes to the operators around it and
    itself, so the total is the time inside top-level operators. Either way `attribute` decides
    the group, and annotations add nothing. Pure: events in, numbers out.
    """
    spans = [event for event in events if event.get("ph") == "X"]
    kernels = [e for e in spans if e.get("cat") == KERNEL or e.get("cat") in DEVICE_COPIES]
    pieces = _kernel_time(spans, kernels) if kernels else _operator_time(spans)
    groups: dict[str, float] = defaultdict(float)
    operators: dict[tuple[str, str], float] = defaultdict(float)
    for group, operator, micros in pieces:
        groups[group] += micros
        operators[(operator, group)] += micros
    steps = {e["name"] for e in spans if STEP_ANNOTATION.fullmatch(e.get("name", ""))}
    return StepProfile(
        "cuda" if kernels else "cpu", max(1, len(steps)), dict(groups), dict(operators)
    )


def _kernel_time(
    spans: list[dict[str, Any]], kernels: list[dict[str, Any]]
) -> Iterator[tuple[str, str, float]]:
    """(group, operator, microseconds) of each kernel, memcpy and memset."""
    launches = {
        e["args"]["correlation"]: e
        for e in spans
        if e.get("cat") in LAUNCHES and "correlation" in e.get("args", {})
    }
    around = _operators_around(spans, list(launches.values()))
    for kernel in kernels:
        launch = launches.get(kernel.get("args", {}).get("correlation"))
        operators = [op["name"] for op in around[id(launch)]] if launch is not None else []
        if kernel["cat"] in DEVICE_COPIES:
            label = operators[-1] if operators else kernel["name"]
            yield COPIES, label, float(kernel["dur"])
        else:
            yield (*attribute(operators, kernel["name"]), float(kernel["dur"]))


def _operator_time(spans: list[dict[str, Any]]) -> Iterator[tuple[str, str, float]]:
    """(group, operator, microseconds) of each operator's self CPU time: its duration less its
    child operators', so the pieces add up to the top-level operators' time."""
    ops = [e for e in spans if e.get("cat") == OPERATOR]
    around = _operators_around(spans, ops)
    children: dict[int, float] = defaultdict(float)
    for op in ops:
        parents = around[id(op)][:-1]  # the last is the operator itself
        if parents:
            children[id(parents[-1])] += float(op["dur"])
    for op in ops:
        names = [around_op["name"] for around_op in around[id(op)]]
        yield (*attribute(names), float(op["dur"]) - children[id(op)])


def _operators_around(
    spans: list[dict[str, Any]], points: list[dict[str, Any]]
) -> dict[int, list[dict[str, Any]]]:
    """id(event) -> the operators on its thread that hold its start, outermost first, for each
    event of `points` (an operator's own list ends with itself). One sweep per thread, in time
    order, keeping the operators still open on a stack."""
    wanted = {id(point) for point in points}
    threads: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for event in spans:
        if event.get("cat") == OPERATOR or id(event) in wanted:
            threads[(event.get("pid"), event.get("tid"))].append(event)
    around: dict[int, list[dict[str, Any]]] = {}
    for events in threads.values():
        # At one instant: operators before launches, a parent (longer) before its child.
        events.sort(key=lambda e: (e["ts"], e.get("cat") != OPERATOR, -e.get("dur", 0)))
        stack: list[dict[str, Any]] = []
        for event in events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= event["ts"]:
                stack.pop()  # ended before this event started: a sibling, not a parent
            if event.get("cat") == OPERATOR:
                stack.append(event)
            if id(event) in wanted:
                around[id(event)] = list(stack)
    return around


def format_profile(profile: StepProfile, *, top: int = 15) -> str:
    """Two markdown tables: the groups with a total line (the kernels' time per step on a GPU),
    and the `top` operators the time was charged to."""
    total = profile.total_us
    where = (
        "GPU kernel time (summed over streams)"
        if profile.device == "cuda"
        else "CPU time in operators"
    )
    lines = [
        f"{profile.steps} step{'s' if profile.steps != 1 else ''} profiled: "
        f"{profile.ms_per_step(total):.2f} ms/step of {where}",
        "",
        "| where | ms/step | share |",
        "|---|---:|---:|",
    ]
    for group, micros in sorted(profile.groups.items(), key=lambda item: -item[1]):
        lines.append(f"| {group} | {profile.ms_per_step(micros):.2f} | {_share(micros, total)} |")
    lines += [f"| total | {profile.ms_per_step(total):.2f} | {_share(total, total)} |", ""]
    lines += ["| operator | where | ms/step | share |", "|---|---|---:|---:|"]
    ranked = sorted(profile.operators.items(), key=lambda item: -item[1])[:top]
    for (operator, group), micros in ranked:
        operator = operator.replace("|", "/")  # a kernel's template arguments may hold one
        lines.append(
            f"| {operator} | {group} | {profile.ms_per_step(micros):.2f} | "
            f"{_share(micros, total)} |"
        )
    return "\n".join(lines)


def _share(micros: float, total: float) -> str:
    return f"{micros / total:.1%}" if total > 0 else "-"


class ProfileSteps(L.Callback):
    """Profiles a few training steps with torch.profiler and prints where a step's time goes
    (`summarise_trace`, `format_profile`) as soon as they are done.

    The profiler steps at each training batch's end, so a step includes its data loading. The
    first `skip` steps are left alone (compilation, allocator and cache warm-up), one more warms
    the profiler up, then `steps` are recorded: the CPU's operators, and the GPU's kernels when
    the model is on CUDA. Only the global-rank-zero process profiles.

    Args:
        steps: how many training steps to record.
        skip: steps before the warm-up step.
        top: how many operators the second table lists.
        trace_path: where to keep the Chrome trace (chrome://tracing, ui.perfetto.dev; a name
            ending in .gz is compressed); None keeps it only while it is summarised.
    """

    def __init__(
        self, steps: int = 3, *, skip: int = 5, top: int = 15, trace_path: str | None = None
    ) -> None:
        if steps < 1 or skip < 0 or top < 0:
            raise ValueError(
                f"ProfileSteps steps={steps}, skip={skip}, top={top}: steps must be at least 1, "
                "skip and top at least 0"
            )
        self.steps, self.skip, self.top, self.trace_path = steps, skip, top, trace_path
        self.profile: StepProfile | None = None  # set once the steps are recorded
        self._profiler: torch.profiler.profile | None = None
        self._precision = ""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if pl_module.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._precision = str(trainer.precision)
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=self.skip, warmup=1, active=self.steps, repeat=1),
            on_trace_ready=self._summarise,
            acc_events=True,  # one cycle: nothing to clear, and no warning that it clears them
        )
        self._profiler.start()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._profiler is not None:
            self._profiler.step()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._profiler is None:
            return
        self._stop()
        if self.profile is None:
            print(
                f"\nprofile: nothing recorded: training ended after {trainer.global_step} steps, "
                f"before the first profiled one (skip={self.skip}, then 1 warm-up step)",
                flush=True,
            )

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if self._profiler is not None:
            self._profiler.on_trace_ready = None  # the error is the news, not a partial profile
            self._stop()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        profiler.stop()  # a window cut short is summarised with the steps it holds

    def _summarise(self, profiler: torch.profiler.profile) -> None:
        with tempfile.TemporaryDirectory(prefix="xfmr-profile-") as scratch:
            path = Path(self.trace_path or Path(scratch) / "trace.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            profiler.export_chrome_trace(str(path))
            self.profile = summarise_trace(load_trace(path))
        kept = f"; trace in {path}" if self.trace_path else ""
        print(
            f"\nprofile of training, {self._precision}, after {self.skip} + 1 warm-up steps{kept}\n"
            f"{format_profile(self.profile, top=self.top)}\n",
            flush=True,
        )
