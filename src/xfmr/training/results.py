"""What a run reports when fitting ends: results.json (its metrics, throughput, history and how
it ended), and for a run that did not complete, the exception that says why and how to go on."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from xfmr.errors import DiskFull, RunFailed, RunInterrupted
from xfmr.files import write_json
from xfmr.run_dir.files import RESULTS_FILE
from xfmr.training.fitting import Fitted
from xfmr.training.interrupts import StopOnSignal
from xfmr.training.module import XfmrModule
from xfmr.training.run_summary import LOGGED_SPEEDS, validation_coverage
from xfmr.training.slurm import requeue


def finish(
    run_dir: Path, results: dict[str, Any], fitted: Fitted, overrides: Sequence[str]
) -> dict[str, Any]:
    """Write results.json; then requeue a job that SLURM warned of its end, and raise what
    ended a run that did not complete."""
    failure = fitted.failure
    plan, stop = fitted.requeue, fitted.stop_on_signal
    requeuing = plan is not None and plan.requeue and stop.requeue_requested and not failure
    results["requeued"] = requeuing  # written first: a requeued job is ended at once
    try:
        write_results(run_dir, results)
        if requeuing and not requeue(plan):
            results["requeued"] = requeuing = False
            write_results(run_dir, results)
    except DiskFull as e:  # the disk is still full: say why the run stopped, and this
        raise RunFailed(f"{failure}; {e}" if failure else str(e)) from None
    if failure:
        raise RunFailed(failure)
    if fitted.status == "interrupted":
        message = interrupted_message(stop, run_dir, overrides)
        if requeuing:
            message = f"{stopped_message(stop)}; job requeued, it resumes in {run_dir}"
        error = RunInterrupted(message)
        error.stopped = stopped_message(stop)  # for a caller's own resume hint
        raise error
    return results


def interrupted_message(stop: StopOnSignal, run_dir: Path, overrides: Sequence[str]) -> str:
    """What stopped the run, where its state is, and the command that goes on from there."""
    command = ["xfmr-train", *(o for o in overrides if not o.startswith("hydra.run.dir="))]
    command.append(f"hydra.run.dir={run_dir}")
    return f"{stopped_message(stop)}; resume with: {' '.join(command)}"


def stopped_message(stop: StopOnSignal) -> str:
    """What stopped the run and where its state is."""
    name = stop.signal_name or "interrupted"
    if not stop.stopped_at:
        return f"{name}: stopped before the first step, nothing to save"
    return f"{name}: stopped after step {stop.stopped_at}, state saved to {stop.checkpoint}"


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    """Strict JSON (a metric that is not a number is null), written to a temporary name and
    renamed, so a reader sees the old file or the new one, never half of one."""
    write_json(run_dir / RESULTS_FILE, results)


def summarize(
    fitted: Fitted,
    module: XfmrModule,
    *,
    started: float,
    overrides: Sequence[str],
    resumed_from: str | None,
) -> dict[str, Any]:
    trainer, summary = fitted.trainer, fitted.summary
    # The model's metrics; the logged throughput is the last logging window's, which the
    # figures below state once for the whole run. Scores measured between validations (the
    # lm_eval callback's) are kept by the summary too: a last validation outside fitting
    # (`fitting._close`) starts callback_metrics afresh.
    metrics = {
        **{
            k: float(v)
            for k, v in trainer.callback_metrics.items()
            if v.numel() == 1 and k not in LOGGED_SPEEDS
        },
        **summary.scores,  # as measured, not as float32 tensors
    }
    ms = summary.ms_per_step
    speeds = summary.speeds(trainer.world_size)
    return {
        "metrics": dict(sorted(metrics.items())),
        "best": summary.best,
        "step": trainer.global_step,
        "wall_time_s": round(time.time() - started, 3),
        "ms_per_step": round(ms, 3) if ms else None,
        "tokens_per_step": summary.tokens_per_step,
        # train_*: at the median training step (ms_per_step); wall_*: over training's wall
        # time, validation, checkpoints and logging included (RunSummary.speeds).
        "train_tokens_per_s": _rounded(speeds["train_tokens_per_s"], 1),
        "wall_tokens_per_s": _rounded(speeds["wall_tokens_per_s"], 1),
        # Model FLOPs utilisation: tokens/s * FLOPs per token / (peak_flops * world_size),
        # null for an architecture without a FLOPs estimate (rnn); see xfmr.training.throughput.
        "flops_per_token": round(summary.flops_per_token) if summary.flops_per_token else None,
        "peak_flops": round(summary.peak_flops) if summary.peak_flops else None,
        # Where the peak came from: throughput.peak_tflops, a GPU's datasheet, or measured.
        "peak_flops_source": summary.peak.source if summary.peak else None,
        # Four significant figures, not decimal places: a tiny model on a large GPU uses a
        # millionth of it, which five places rounded to 0.0.
        "train_mfu": _significant(speeds["train_mfu"]),
        "wall_mfu": _significant(speeds["wall_mfu"]),
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "precision": str(trainer.precision),  # as trainer.precision=auto chose it
        # The GPUs the run was given (a sweep's job: its group), as the process saw them.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "threads": torch.get_num_threads(),
        "n_parameters": sum(p.numel() for p in module.model.parameters()),
        "overrides": list(overrides),
        "resumed_from": resumed_from,
        "history": summary.history,
        # How much of the validation split each validation read (data.val_batches).
        "val_coverage": validation_coverage(trainer),
    }


def _rounded(value: float | None, places: int) -> float | None:
    return round(value, places) if value is not None else None


def _significant(value: float | None, figures: int = 4) -> float | None:
    return float(f"{value:.{figures}g}") if value is not None else None
