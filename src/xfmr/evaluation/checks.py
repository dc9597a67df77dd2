"""What a tasks= run is checked for before anything loads: lm-evaluation-harness, an optional
extra (the one line that says which to install), the task names and the settings. No torch, no
lm-eval at import."""

from __future__ import annotations

import os
from collections.abc import Sequence

from xfmr.errors import UserError

EXTRA = "pip install 'xfmr[eval]'"
# Tasks read local files only (`dataset_path: json` with `data_files`); nothing is fetched from
# the Hub while they run. A person who wants the Hub's tasks sets these to 0 themselves.
OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def require_lm_eval() -> None:
    """Import lm-eval, or raise a UserError naming the extra that installs it."""
    for variable in OFFLINE:
        os.environ.setdefault(variable, "1")
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise UserError(
            f"tasks= runs lm-evaluation-harness (lm-eval), which is not installed: {EXTRA}"
        ) from None


def task_names(tasks: str | Sequence[str] | None) -> list[str]:
    """`tasks=a,b` (or a list) as names; none given is a UserError."""
    names = tasks.split(",") if isinstance(tasks, str) else list(tasks or [])
    names = [str(name).strip() for name in names if str(name).strip()]
    if not names:
        raise UserError(
            f"tasks={tasks!r} names no task: give tasks=NAME[,NAME...], lm-eval task names "
            "(xfmr's own, or those of tasks_dir=DIR)"
        )
    return names


def check_task_settings(
    *, limit: int | float | None, batch_size: int, num_fewshot: int | None
) -> None:
    """The settings of a tasks= run, checked before anything loads."""
    if limit is not None and (
        isinstance(limit, bool)
        or not isinstance(limit, int | float)
        or limit <= 0
        or (isinstance(limit, float) and limit >= 1)
    ):
        raise UserError(
            f"limit={limit!r}: give a whole number of examples per task (>= 1), or a fraction "
            "of each task in (0, 1)"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch_size={batch_size!r}: give a whole number >= 1")
    if num_fewshot is not None and (
        isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0
    ):
        raise UserError(f"num_fewshot={num_fewshot!r}: give a whole number >= 0, or null")
