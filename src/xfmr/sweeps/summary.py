"""The end of a sweep: counts, the best job, `sweep.json`, and whether it failed."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from xfmr.files import write_json
from xfmr.run_dir.files import SWEEP_FILE
from xfmr.sweeps.jobs import JobOutcome

log = logging.getLogger("xfmr")


def summarize(
    outcomes: list[JobOutcome],
    *,
    kind: str,
    metric: str,
    direction: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`sweep.json`'s content: every job, the counts per status and the best completed job."""
    outcomes = sorted(outcomes, key=lambda o: o.num)
    counts = Counter(o.status for o in outcomes)
    scored = [o for o in outcomes if o.status == "completed" and o.value is not None]
    sign = 1.0 if direction == "minimize" else -1.0
    best = min(scored, key=lambda o: sign * o.value) if scored else None
    return {
        "kind": kind,
        "optimized_metric": metric,
        "direction": direction,
        **(extra or {}),
        "counts": {s: counts.get(s, 0) for s in ("completed", "failed", "pruned", "interrupted")},
        "best": best.as_dict() if best else None,
        "jobs": [o.as_dict() for o in outcomes],
    }


def write_summary(sweep_dir: Path, summary: dict[str, Any]) -> Path:
    """Strict JSON, written to a temporary name and renamed, so a reader never sees half a
    file."""
    path = sweep_dir / SWEEP_FILE
    write_json(path, summary)
    return path


def report(summary: dict[str, Any], path: Path) -> None:
    counts = summary["counts"]
    shown = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    log.info("sweep: %d jobs: %s; summary in %s", len(summary["jobs"]), shown or "none", path)
    shown_keys = varying_keys(summary["jobs"])
    for job in summary["jobs"]:
        if job["status"] != "completed":
            detail = job.get("reason") or f"at step {job.get('step')}"
            log.info(
                "  job %s %s: %s  [%s]", job["num"], job["status"], detail, _shown(job, shown_keys)
            )
    best = summary["best"]
    if best:
        log.info(
            "best: job %s, %s = %.6g  [%s]",
            best["num"],
            summary["optimized_metric"],
            best["value"],
            _shown(best, shown_keys),
        )


def varying_keys(jobs: list[dict[str, Any]]) -> set[str]:
    """The override keys whose values differ between jobs: what tells one job from another."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job["overrides"]:
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    return {k for k, v in values.items() if len(v) > 1 or len(jobs) == 1}


def _shown(job: dict[str, Any], keys: set[str]) -> str:
    return " ".join(o for o in job["overrides"] if o.partition("=")[0] in keys)


def failed_too_often(summary: dict[str, Any], max_failure_rate: float) -> bool:
    """More failed jobs than the sweep allows (a grid allows none by default)."""
    ended = sum(summary["counts"].values())
    failed = summary["counts"]["failed"] + summary["counts"]["interrupted"]
    return ended > 0 and failed / ended > max_failure_rate
