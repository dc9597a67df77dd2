"""The loop state of checkpoints written before a training batch was one optimizer step's window
(Lightning's automatic optimization, a batch per micro-batch) is read as the state a run in
today's layout has at the same point, wherever Lightning saved it. tests/training/test_resume.py
resumes a run from such checkpoints."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from xfmr.training.earlier_checkpoints import from_automatic_optimization

MANUAL = "epoch_loop.manual_optimization.optim_step_progress"
AUTOMATIC = "epoch_loop.automatic_optimization.optim_progress"
BATCHES = "epoch_loop.batch_progress"


def _progress(ready: int, completed: int, *, batches: bool = False) -> dict[str, int]:
    counts = {"ready": ready, "completed": completed}
    return {**counts, "started": ready, "processed": ready} if batches else counts


def _checkpoint(
    *, steps: int, ready: int, completed: int, before: int, last: bool, manual: int = 0
) -> dict[str, Any]:
    """Loop state with `steps` optimizer steps (the automatic loop's, or the manual's), the
    epoch's batches `ready` and `completed`, and `before` batches in earlier epochs."""
    automatic = 0 if manual else steps
    return {
        "loops": {
            "fit_loop": {
                AUTOMATIC: {"optimizer": {"step": {"total": _progress(automatic, automatic)}}},
                MANUAL: {"total": _progress(manual, manual), "current": _progress(manual, manual)},
                BATCHES: {
                    "total": _progress(before + ready, before + completed, batches=True),
                    "current": _progress(ready, completed, batches=True),
                    "is_last_batch": last,
                },
            }
        }
    }


# Two micro-batches a step, five an epoch: windows [0, 2), [2, 4) and the short [4, 5).
CASES = {
    # At a validation (all counts equal): after step 4, the first window of the second epoch.
    "validation": (dict(steps=4, ready=2, completed=2, before=5, last=False), (1, 1), (4, 4)),
    # In on_train_batch_end of the epoch's last batch (a periodic checkpoint): step 3 counted,
    # its batch not yet completed.
    "step end": (dict(steps=3, ready=5, completed=4, before=0, last=True), (3, 2), (3, 2)),
    # In on_train_batch_end inside a window (a signal): step 1 taken, the second under way.
    "inside a window": (dict(steps=1, ready=3, completed=2, before=0, last=False), (2, 1), (2, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_old_loop_state_reads_as_windows_and_optimizer_steps(case: str) -> None:
    old, (ready, completed), (total_ready, total_completed) = CASES[case]
    checkpoint = _checkpoint(**old)
    from_automatic_optimization(checkpoint, window=2)
    loop = checkpoint["loops"]["fit_loop"]
    assert loop[MANUAL]["total"] == _progress(old["steps"], old["steps"])
    assert loop[BATCHES]["current"] == _progress(ready, completed, batches=True)
    assert loop[BATCHES]["total"] == _progress(total_ready, total_completed, batches=True)


def test_today_s_layout_and_a_checkpoint_before_any_step_are_left_alone() -> None:
    for checkpoint in (
        _checkpoint(steps=4, ready=1, completed=1, before=3, last=False, manual=4),
        _checkpoint(steps=0, ready=0, completed=0, before=0, last=False),
        {"state_dict": {}},  # weights only
    ):
        kept = copy.deepcopy(checkpoint)
        from_automatic_optimization(checkpoint, window=2)
        assert checkpoint == kept
