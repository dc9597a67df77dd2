"""The training step through torch.compile: the model's forward and the objective's loss in one
graph (`objective.forward(model, batch)` compiled whole), in the mode `compile` names.

The module is not compiled, only the function that calls it, so parameter names and checkpoints
are those of an eager run. Validation and generation stay eager: they would compile again for
their own graphs and shapes, for steps that are few.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger("xfmr")

# Distinct batch shapes one compiled step serves under CUDA graphs, which records a graph (and
# keeps its memory) for each; text cut into blocks has one shape, or two with a short last
# batch.
MAX_GRAPHS = 4
# torch.compile's modes that record CUDA graphs on a GPU (torch._inductor.list_mode_options:
# `triton.cudagraphs`): max-autotune as well as reduce-overhead.
CUDA_GRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})


def auto_mode(
    *, cuda: bool, processes: int | None, fixed_shapes: bool
) -> tuple[str | None, str | None]:
    """compile=auto's mode for a run, and the one line that says what it chose and why.

    CUDA graphs where they pay and hold: one CUDA process (a small model's step is launch-bound
    there: on an H200, nanoGPT's Shakespeare shape ran at 0.51x nanoGPT's compiled ms/step) whose
    training batches have one shape (each new shape records another graph). Elsewhere eager: on
    a CPU a compile costs more than it saves in most runs, and nothing is said; on a GPU the
    line says which value compiles. `processes`: the run's processes (None: not known).
    """
    if not cuda:
        return None, None
    if processes == 1 and fixed_shapes:
        return "reduce-overhead", (
            "compile=auto: compile=reduce-overhead (CUDA graphs: every training batch has one "
            "shape); the first step compiles, tens of seconds; compile=false runs eagerly"
        )
    why = "batches vary in shape" if processes == 1 else "several processes"
    return None, (
        f"compile=auto: the step runs eagerly ({why}); compile=true compiles it once for every "
        "shape, tens of seconds before the first step"
    )


class CompiledStep:
    """`step(model, batch)` compiled in `mode`; eager where compiling cannot serve a batch.

    Two cases run eagerly instead of failing mid-run, each said once in one line: a batch
    shape past `MAX_GRAPHS` distinct ones under CUDA graphs (data padded to each batch's
    longest example has a new shape every few batches: compile=true serves them with one
    graph of dynamic shape), and a compile that fails (torch's compiler raises; the run goes
    on eagerly).
    """

    def __init__(self, step: Callable[..., Any], mode: str) -> None:
        self.eager = step
        self.mode = mode
        self.compiled: Callable[..., Any] | None = torch.compile(step, mode=mode)
        self.shapes: set[tuple] = set()
        self._said_shape = False

    def __call__(self, model: torch.nn.Module, batch: dict[str, Any]) -> Any:
        if self.compiled is None or not self._serves(batch):
            return self.eager(model, batch)
        try:
            return self.compiled(model, batch)
        except torch._dynamo.exc.TorchDynamoException as e:
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            log.warning(
                "compile=%s failed (%s): training goes on without compiling",
                self.mode,
                first_line[:200],
            )
            self.compiled = None
            return self.eager(model, batch)

    def _serves(self, batch: dict[str, Any]) -> bool:
        if self.mode not in CUDA_GRAPH_MODES:
            return True
        shape = tuple((k, tuple(v.shape)) for k, v in batch.items() if isinstance(v, torch.Tensor))
        if shape in self.shapes:
            return True
        if len(self.shapes) < MAX_GRAPHS:
            self.shapes.add(shape)
            return True
        if not self._said_shape:
            self._said_shape = True
            log.warning(
                "compile=%s: a batch of a %s shape (%s) runs eagerly, as will any "
                "other new shape: CUDA graphs are recorded for %d batch shapes; data whose "
                "batches vary in length trains faster with compile=true",
                self.mode,
                _ordinal(MAX_GRAPHS + 1),
                ", ".join(f"{k} {list(s)}" for k, s in shape),
                MAX_GRAPHS,
            )
        return False


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
