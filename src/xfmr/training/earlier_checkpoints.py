"""Checkpoints written by earlier versions of xfmr, resumed by this one.

Earlier versions trained under Lightning's automatic optimization, one training batch a
micro-batch: their loop state counts optimizer steps in the automatic loop's progress and
training batches in micro-batches. Now the training step makes the optimizer step itself
(manual optimization) on a window of micro-batches a batch, and Lightning takes
`trainer.global_step` from the manual loop's progress, which such a checkpoint has at 0. The
loop state is rewritten into today's layout before Lightning restores its loops (the module's
`on_load_checkpoint`), so the run resumes at its step, with the validation and logging cadence
it had. Checked against Lightning 2.6.6's loop state keys. The loader's place (micro-batches
handed out in the epoch) and the steps Lightning's loggers count are the same in both.
"""

from __future__ import annotations

import copy
from typing import Any

from xfmr.data.order import windows_of

_AUTOMATIC = "epoch_loop.automatic_optimization.optim_progress"
_MANUAL = "epoch_loop.manual_optimization.optim_step_progress"
_BATCHES = "epoch_loop.batch_progress"


def from_automatic_optimization(checkpoint: dict[str, Any], *, window: int) -> None:
    """Rewrite, in place, the fit loop's state of a checkpoint saved under automatic
    optimization with `window` micro-batches a step: the optimizer steps into the manual loop's
    progress, and the batches of the epoch and of the run into windows. A checkpoint in
    today's layout (or one saved before its first step) is left as it is."""
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    steps = loop.get(_AUTOMATIC, {}).get("optimizer", {}).get("step")
    if not steps or not steps["total"]["completed"] or loop[_MANUAL]["total"]["completed"]:
        return
    loop[_MANUAL] = copy.deepcopy(steps)
    batches = loop[_BATCHES]
    before = batches["current"]
    # Saved while a batch was under way (in `on_train_batch_end`): it is one window's too,
    # and the optimizer step counts it already if that batch ended its window.
    under_way = before["completed"] < before["ready"]
    stepped = before["ready"] % window == 0 or batches["is_last_batch"]
    current = {key: windows_of(count, window) for key, count in before.items()}
    if under_way:
        current["completed"] = current["ready"] - 1
    done = steps["total"]["completed"] - (1 if under_way and stepped else 0)
    batches["current"] = current
    batches["total"] = {key: done + count - current["completed"] for key, count in current.items()}
