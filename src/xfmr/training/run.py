"""`run_training(cfg)`: build the parts a checked config names, fit them, write `results.json`.

Kept apart from the Hydra entry point so that DDP workers and tests train through the same code
as `xfmr-train` and `xfmr.train` (which reach it through `xfmr.api.training.fit_checked`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from xfmr.checks import AUTO_PRECISION, compile_mode
from xfmr.errors import DiskFull, RunFailed, RunInterrupted, UserError
from xfmr.files import atomic_path, write_json
from xfmr.nn.config import ModelConfig, differences, resume_keys
from xfmr.parts.build import Parts, build_parts, plan_training
from xfmr.parts.transfer import freeze_backbone, initialise_from
from xfmr.run_dir.checkpoints import SAFETENSORS_SUFFIX, read_checkpoint
from xfmr.run_dir.cluster import slurm_restarts
from xfmr.run_dir.files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DDP_LOG_DIR,
    LAST_CHECKPOINT,
    PERIODIC_GLOB,
    RESULTS_FILE,
    SHARDED_STATE_FILE,
    is_checkpoint,
)
from xfmr.run_dir.lock import is_global_rank_zero
from xfmr.text.tokenizers import TextTokenizer
from xfmr.training.checkpoint_saving import AtomicCheckpointIO
from xfmr.training.guards import NonFiniteGuard, TrialPruning, out_of_memory
from xfmr.training.interrupts import ContinuedCsvLog, StopOnSignal
from xfmr.training.launch import LocalDDPLauncher, processes_to_launch
from xfmr.training.loggers import finish_loggers, log_run_params, read_csv_rows
from xfmr.training.module import TAKEN_FROM_TRAINER, XfmrModule
from xfmr.training.run_summary import RunSummary, validation_coverage
from xfmr.training.slurm import Requeue, cluster_plugins, requeue, requeue_plan
from xfmr.training.text_sample import TextSample

log = logging.getLogger("xfmr")


def run_training(
    cfg: DictConfig, *, is_worker: bool = False, overrides: Sequence[str] = ()
) -> dict[str, Any] | None:
    """Train the checked experiment `cfg` (fully resolved, its trainer.precision chosen by
    `check_config`) in `cfg.paths.output_dir`; returns what it writes to `results.json` (None
    on DDP workers).

    The caller holds the run directory's lock (`xfmr.api.training.fit_checked`, the path of
    `xfmr-train` and `xfmr.train`); DDP workers train beside the process that holds it.
    """
    assert cfg.trainer.precision != AUTO_PRECISION, "check_config chooses trainer.precision"
    started = time.time()
    run_dir = Path(cfg.paths.output_dir)
    plan = plan_training(cfg, run_dir)  # a missing init_from fails before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    tidy_lightning_logging()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    # Rank 0 writes the run directory; the other ranks (xfmr's DDP workers, and those torchrun
    # or SLURM started, on this node or others) read what it wrote.
    writes = not is_worker and is_global_rank_zero()
    window = int(cfg.trainer.accumulate_grad_batches)  # training batches per optimizer step
    parts = build_parts(plan, data=cfg.data, is_worker=not writes, window=window)
    ckpt_path = resolve_checkpoint(cfg.ckpt_path, run_dir, parts.model_config.to_dict())
    if cfg.model.get("target_params") is not None:  # config.yaml records the width chosen
        cfg.model.d_model = parts.model_config.d_model
    if writes:
        save_config(cfg, run_dir, ckpt_path)
    nonfinite = NonFiniteGuard(max_skips=int(cfg.nonfinite.max_skips))
    module = training_module(cfg, parts, nonfinite)
    transfer = None
    if plan.init and not ckpt_path:  # a resumed run already holds the transferred weights
        transfer = initialise_from(module.model, plan.init)
    if cfg.get("finetune", {}).get("freeze_backbone"):
        freeze_backbone(module.model)
    fitted = fit_run(cfg, run_dir, parts, module, ckpt_path=ckpt_path, is_worker=is_worker)
    if is_worker or fitted.trainer.global_rank != 0:
        return None
    results = summarize(
        fitted.trainer,
        fitted.summary,
        module,
        started=started,
        overrides=overrides,
        resumed_from=ckpt_path,
    )
    results.update(
        status=fitted.status,
        optimized_metric=cfg.get("optimized_metric"),
        skipped_steps=nonfinite.skipped,  # non-finite steps left out (nonfinite.max_skips)
    )
    if fitted.failure:
        results["reason"] = fitted.failure
    if transfer is not None:
        results["init_from"] = {"source": str(plan.init.path), **transfer.summary()}
    if fitted.requeue is not None and fitted.requeue.job is not None:
        results.update(slurm_job_id=fitted.requeue.job, slurm_restart_count=slurm_restarts())
    return finish(run_dir, results, fitted, overrides)


@dataclass
class Fitted:
    """How fitting ended: the trainer, the run's status and, if it failed, why."""

    trainer: L.Trainer
    summary: RunSummary
    stop_on_signal: StopOnSignal
    status: str
    failure: str | None
    requeue: Requeue | None = None  # the requeue signal under SLURM, and who requeues


def save_config(cfg: DictConfig, run_dir: Path, ckpt_path: str | None) -> None:
    """The resolved config, with the checkpoint the run resumes from, in RUN_DIR/config.yaml."""
    cfg.ckpt_path = ckpt_path
    with atomic_path(run_dir / CONFIG_FILE) as temporary:
        OmegaConf.save(cfg, temporary)
    if ckpt_path:
        log.info("resuming from %s", ckpt_path)


def training_module(cfg: DictConfig, parts: Parts, nonfinite: NonFiniteGuard) -> XfmrModule:
    return XfmrModule(
        model=parts.model,
        model_config=parts.model_config.to_dict(),
        objective=parts.objective,
        optimizer=instantiate(cfg.optim),
        scheduler=instantiate(cfg.schedule) if cfg.get("schedule") else None,
        backbone_lr_scale=float(cfg.get("finetune", {}).get("backbone_lr_scale", 1.0)),
        compile=compile_mode(cfg.get("compile")),
        nonfinite_guard=nonfinite,
        accumulate=int(cfg.trainer.accumulate_grad_batches),
        gradient_clip_val=cfg.trainer.get("gradient_clip_val"),
        gradient_clip_algorithm=cfg.trainer.get("gradient_clip_algorithm"),
    )


def fit_run(
    cfg: DictConfig,
    run_dir: Path,
    parts: Parts,
    module: XfmrModule,
    *,
    ckpt_path: str | None,
    is_worker: bool,
) -> Fitted:
    """Fit `module` on the parts' data with the config's trainer, loggers and callbacks (and
    the DDP workers it launches); validate and save the last state of a run that ended well."""
    summary = RunSummary(
        peak_tflops=cfg.throughput.peak_tflops,
        cache_dir=cfg.paths.cache_dir,
    )
    nprocs = 1 if is_worker else processes_to_launch(OmegaConf.to_container(cfg.trainer))
    launcher = (
        LocalDDPLauncher(nprocs, run_dir / CONFIG_FILE, run_dir / DDP_LOG_DIR)
        if nprocs > 1
        else nullcontext()
    )
    pruning = TrialPruning(cfg.trial) if cfg.get("trial") else None
    requeue = requeue_plan(cfg.slurm)
    stop_on_signal = StopOnSignal(
        run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT,
        requeue_signal=requeue.signal if requeue is not None else None,
    )
    earlier_rows = read_csv_rows(cfg.get("logger")) if ckpt_path and not is_worker else []
    with launcher:
        loggers = _instantiate_all(cfg.get("logger"))
        log_run_params(loggers, cfg, val_metrics=module.val_metrics)
        # The summary first: a logging step's figures are ready for the progress bar.
        callbacks = [summary, *_instantiate_all(cfg.get("callbacks")), stop_on_signal]
        callbacks += [pruning] if pruning else []
        callbacks += [ContinuedCsvLog(earlier_rows)] if earlier_rows else []
        trainer = instantiate(
            cfg.trainer,
            callbacks=_fitting(callbacks, loggers, parts.tokenizer),
            logger=loggers or False,
            default_root_dir=str(run_dir),
            plugins=[AtomicCheckpointIO(), *cluster_plugins(requeue)],
            **TAKEN_FROM_TRAINER,
        )
        failure = fit(
            trainer,
            module,
            parts.datamodule,
            ckpt_path=ckpt_path,
            cfg=cfg,
            stop_on_signal=stop_on_signal,
        )
        status = run_status(trainer, failure, pruning, stop_on_signal)
        if status in ("completed", "pruned"):
            with keyboard_interrupt_returns(stop_on_signal):  # Ctrl-C in the last validation
                failure, status = _close(
                    trainer, module, parts.datamodule, summary, run_dir, status
                )
            if stop_on_signal.keyboard_interrupt:
                status = "interrupted"
        finish_loggers(trainer, status)
    return Fitted(trainer, summary, stop_on_signal, status, failure, requeue)


def _fitting(callbacks: list[Any], loggers: list[Any], tokenizer: TextTokenizer) -> list[Any]:
    """The callbacks, minus what has nothing to report to, with what they need at run time."""
    if not loggers:  # with logger=none there is nowhere to send learning rates
        callbacks = [c for c in callbacks if type(c).__name__ != "LearningRateMonitor"]
    for callback in callbacks:
        if isinstance(callback, TextSample):
            callback.tokenizer = tokenizer
    return callbacks


def _close(
    trainer: L.Trainer,
    module: XfmrModule,
    datamodule: Any,
    summary: RunSummary,
    run_dir: Path,
    status: str,
) -> tuple[str | None, str]:
    """Validate the last step (unless it just was) and save the last state: (failure, status).

    A run resumed when it had already finished trains no step and validates nothing: it is
    validated again, so that results.json still has its final metrics. (Lightning calls the
    summary's on_validation_end from `validate` too, which records the entry.)"""
    validated = summary.history and summary.history[-1]["step"] == trainer.global_step
    if not validated or summary.monitor not in trainer.callback_metrics:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    try:
        trainer.save_checkpoint(run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT)
    except DiskFull as e:
        return str(e), "failed"
    return None, status


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


def fit(
    trainer: L.Trainer,
    module: XfmrModule,
    datamodule: Any,
    *,
    ckpt_path: str | None,
    cfg: Any,
    stop_on_signal: StopOnSignal,
) -> str | None:
    """Train; the reason the run failed (a loss that is not a number, a full disk, memory run
    out), or None. The checkpoints on disk are then the last ones written whole."""
    try:
        with keyboard_interrupt_returns(stop_on_signal):
            # Lightning's own load of ckpt_path is as safe as resolve_checkpoint's read of it.
            trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
    except RunFailed as e:
        return str(e)
    except (RuntimeError, MemoryError) as e:
        reason = out_of_memory(e, cfg)
        if reason is None:
            raise
        log.error("%s", e)
        return reason
    return None


@contextmanager
def keyboard_interrupt_returns(stop_on_signal: StopOnSignal) -> Iterator[None]:
    """Lightning answers a KeyboardInterrupt by ignoring SIGINT from then on and calling
    `sys.exit(1)`, which would end a notebook's kernel for Ctrl-C. Here the state is saved
    (`StopOnSignal.on_exception`), SIGINT's handler is put back and fitting returns, so the run
    ends `interrupted` as on SIGINT; a second interrupt, which saves nothing, raises
    KeyboardInterrupt."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main_thread else None
    try:
        yield
    except SystemExit:
        if not stop_on_signal.keyboard_interrupt:
            raise
        if stop_on_signal.stopped_at is None:
            raise KeyboardInterrupt from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_status(
    trainer: L.Trainer,
    failure: str | None,
    pruning: TrialPruning | None,
    stop_on_signal: StopOnSignal,
) -> str:
    if failure:
        return "failed"
    if trainer.interrupted or stop_on_signal.stopped_at is not None:
        return "interrupted"
    if pruning is not None and pruning.pruned_at is not None:
        return "pruned"
    return "completed"


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


def _instantiate_all(section: DictConfig | None) -> list[Any]:
    """Each entry of a dict-of-targets section; `name: null` switches one off."""
    return [instantiate(item) for item in (section or {}).values() if item is not None]


_NOISE = (
    "litlogger",
    "`weights_only` was not set",
    "GPU available:",
    "TPU available:",
    "Skipping setting a default `ModelSummary`",  # xfmr's own summary is in the callbacks
)


def tidy_lightning_logging() -> None:
    """Lightning's loggers print through their own handlers and then again through the root's:
    send them through the root only (the console and the run's log file), minus its adverts."""
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    root = logging.getLogger()
    if not root.handlers:  # DDP workers: no Hydra logging configured
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    for handler in root.handlers:
        if not any(isinstance(f, _DropNoise) for f in handler.filters):
            handler.addFilter(_DropNoise())


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in _NOISE)


def resolve_checkpoint(
    ckpt_path: str | None, run_dir: Path, model_config: dict[str, Any]
) -> str | None:
    """`ckpt_path` if given, else the newest of the run directory's `last.ckpt` and periodic
    `step-*.ckpt`, if any; checked before any training so a wrong file fails fast and nothing
    already saved is touched."""
    if not ckpt_path:
        newest = newest_checkpoint(run_dir / CHECKPOINT_DIR)
        if newest is None:
            return None
        ckpt_path = str(newest)
    path = Path(ckpt_path)
    if not is_checkpoint(path):
        raise UserError(
            f"ckpt_path={ckpt_path!r} does not exist: give a .ckpt file (or, under trainer=fsdp, "
            "folder) written by xfmr-train"
        )
    if path.suffix == SAFETENSORS_SUFFIX:
        raise UserError(
            f"ckpt_path={ckpt_path!r} holds weights only, no optimizer or loop state to resume: "
            f"start a new run from it with init_from={ckpt_path}"
        )
    saved = read_checkpoint(path, key="ckpt_path", mmap=True)["hyper_parameters"]["model_config"]
    differs = differences(
        ModelConfig.from_dict(saved), ModelConfig.from_dict(model_config), ignore=resume_keys()
    )
    if differs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(f"ckpt_path={ckpt_path!r} was trained with a different model ({detail})")
    return str(path)


def newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint a run resumes from: the last written of `last.ckpt` and `step-*.ckpt`
    (every one is written whole, then renamed into place; a sharded one is a folder, whose
    time is its state file's)."""
    candidates = (directory / LAST_CHECKPOINT, *directory.glob(PERIODIC_GLOB))
    found = [p / SHARDED_STATE_FILE if p.is_dir() else p for p in candidates if is_checkpoint(p)]
    newest = max(found, key=lambda p: p.stat().st_mtime_ns, default=None)
    return newest.parent if newest is not None and newest.name == SHARDED_STATE_FILE else newest


def summarize(
    trainer: L.Trainer,
    summary: RunSummary,
    module: XfmrModule,
    *,
    started: float,
    overrides: Sequence[str],
    resumed_from: str | None,
) -> dict[str, Any]:
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    ms = summary.ms_per_step
    tokens_per_s = summary.tokens_per_step / (ms / 1000.0) if ms else None
    mfu = summary.mfu(tokens_per_s, trainer.world_size)
    return {
        "metrics": dict(sorted(metrics.items())),
        "best": summary.best,
        "step": trainer.global_step,
        "wall_time_s": round(time.time() - started, 3),
        "ms_per_step": round(ms, 3) if ms else None,
        "tokens_per_step": summary.tokens_per_step,
        "tokens_per_s": round(tokens_per_s, 1) if tokens_per_s else None,
        # Model FLOPs utilisation: tokens_per_s * flops_per_token / (peak_flops * world_size),
        # null for an architecture without a FLOPs estimate (rnn); see xfmr.training.throughput.
        "flops_per_token": round(summary.flops_per_token) if summary.flops_per_token else None,
        "peak_flops": round(summary.peak_flops) if summary.peak_flops else None,
        # Where the peak came from: throughput.peak_tflops, a GPU's datasheet, or measured.
        "peak_flops_source": summary.peak.source if summary.peak else None,
        "mfu": round(mfu, 5) if mfu is not None else None,
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
