"""`train(cfg)`: build the parts a resolved config names, fit them, write `results.json`.

Kept apart from the Hydra entry point so DDP workers, tests and notebooks call the same code.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from xfmr.checks import model_config as model_config_for
from xfmr.errors import DiskFull, RunFailed, RunInterrupted, UserError
from xfmr.files import atomic_path, write_json
from xfmr.run_dir.checkpoints import SAFETENSORS_SUFFIX, read_checkpoint
from xfmr.run_dir.files import LABELS_FILE, read_labels
from xfmr.run_dir.lock import hold_run_dir, is_global_rank_zero
from xfmr.text.sample import BYTES_PER_MB, survey, training_text
from xfmr.text.tokenizers import TextTokenizer, TokenizerSpec, fit_or_load
from xfmr.training.callbacks import RunSummary, TextSample
from xfmr.training.checkpoint_saving import AtomicCheckpointIO
from xfmr.training.guards import NonFiniteGuard, TrialPruning, out_of_memory
from xfmr.training.interrupts import ContinuedCsvLog, StopOnSignal
from xfmr.training.launch import LocalDDPLauncher, processes_to_launch
from xfmr.training.loggers import finish_loggers, log_run_params, read_csv_rows
from xfmr.training.module import XfmrModule
from xfmr.training.transfer import (
    InitSource,
    freeze_backbone,
    init_source,
    initialise_from,
    pretrained_model_config,
)

log = logging.getLogger("xfmr")

RESULTS_FILE = "results.json"
CONFIG_FILE = "config.yaml"


def train(
    cfg: DictConfig, *, is_worker: bool = False, overrides: Sequence[str] = ()
) -> dict[str, Any] | None:
    """Train the experiment `cfg` (fully resolved) in `cfg.paths.output_dir`.

    Returns the results written to `results.json` (None on DDP workers). The run directory is
    locked while it trains (`xfmr.run_dir.lock`): one training process per directory.
    """
    source = init_source(cfg.get("init_from"))  # a missing source fails before anything is written
    run_dir = Path(cfg.paths.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    # DDP workers, and the other ranks of a run launched by torchrun or SLURM, train beside rank 0.
    lock = hold_run_dir(run_dir) if not is_worker and is_global_rank_zero() else nullcontext()
    with lock:
        return _train(cfg, run_dir, source, is_worker=is_worker, overrides=overrides)


def _train(
    cfg: DictConfig,
    run_dir: Path,
    source: InitSource | None,
    *,
    is_worker: bool,
    overrides: Sequence[str],
) -> dict[str, Any] | None:
    started = time.time()
    tidy_lightning_logging()
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = instantiate(cfg.data)
    objective = instantiate(cfg.objective)
    tokenizer = prepare_tokenizer(
        cfg,
        datamodule,
        run_dir,
        cache_only=is_worker,
        special_tokens=objective.required_special_tokens,
        pretrained=source.tokenizer if source else None,
    )
    objective.bind(tokenizer)
    if objective.uses_labels:  # the label set is the data's, known once it is read
        objective.bind_labels(run_labels(datamodule, run_dir, save=not is_worker))
    datamodule.attach(tokenizer, objective.collate)
    if source and source.kind == "hf":
        model_config = pretrained_model_config(cfg, source.path, objective).to_dict()
    else:
        model_config = model_config_for(cfg, vocab_size=tokenizer.vocab_size).to_dict()
    ckpt_path = resolve_checkpoint(cfg.ckpt_path, run_dir, model_config)
    if not is_worker:
        cfg.ckpt_path = ckpt_path
        with atomic_path(run_dir / CONFIG_FILE) as temporary:
            OmegaConf.save(cfg, temporary)
        if ckpt_path:
            log.info("resuming from %s", ckpt_path)

    nonfinite = NonFiniteGuard(max_skips=int(cfg.nonfinite.max_skips))
    module = XfmrModule(
        model_config=model_config,
        objective=objective,
        optimizer=instantiate(cfg.optim),
        scheduler=instantiate(cfg.schedule) if cfg.get("schedule") else None,
        backbone_lr_scale=float(cfg.get("finetune", {}).get("backbone_lr_scale", 1.0)),
        compile=bool(cfg.compile),
        nonfinite_guard=nonfinite,
    )
    transfer = None
    if source and not ckpt_path:  # a resumed run already holds the transferred weights
        transfer = initialise_from(module.model, source)
    if cfg.get("finetune", {}).get("freeze_backbone"):
        freeze_backbone(module.model)
    peak_tflops = cfg.throughput.peak_tflops
    summary = RunSummary(
        peak_flops=None if peak_tflops is None else float(peak_tflops) * 1e12,
        cache_dir=cfg.paths.cache_dir,
    )
    nprocs = 1 if is_worker else processes_to_launch(OmegaConf.to_container(cfg.trainer))
    launcher = (
        LocalDDPLauncher(nprocs, run_dir / CONFIG_FILE, run_dir / "ddp")
        if nprocs > 1
        else nullcontext()
    )
    pruning = TrialPruning(cfg.trial) if cfg.get("trial") else None
    stop_on_signal = StopOnSignal(run_dir / "checkpoints" / "last.ckpt")
    earlier_rows = read_csv_rows(cfg.get("logger")) if ckpt_path and not is_worker else []
    with launcher:
        loggers = _instantiate_all(cfg.get("logger"))
        log_run_params(loggers, cfg, val_metrics=module.val_metrics)
        callbacks = [*_instantiate_all(cfg.get("callbacks")), summary, stop_on_signal]
        callbacks += [pruning] if pruning else []
        callbacks += [ContinuedCsvLog(earlier_rows)] if earlier_rows else []
        if not loggers:  # with logger=none there is nowhere to send learning rates
            callbacks = [c for c in callbacks if type(c).__name__ != "LearningRateMonitor"]
        for callback in callbacks:
            if isinstance(callback, TextSample):
                callback.tokenizer = tokenizer
        trainer = instantiate(
            cfg.trainer,
            callbacks=callbacks,
            logger=loggers or False,
            default_root_dir=str(run_dir),
            plugins=[AtomicCheckpointIO()],
        )
        failure = fit(trainer, module, datamodule, ckpt_path=ckpt_path, cfg=cfg)
        status = run_status(trainer, failure, pruning, stop_on_signal)
        if status in ("completed", "pruned"):
            if not summary.history or summary.history[-1]["step"] != trainer.global_step:
                trainer.validate(module, datamodule=datamodule, verbose=False)
                summary.on_validation_end(trainer, module)
            try:
                trainer.save_checkpoint(run_dir / "checkpoints" / "last.ckpt")
            except DiskFull as e:
                failure, status = str(e), "failed"
        finish_loggers(trainer, status)
    if is_worker or trainer.global_rank != 0:
        return None
    results = summarize(
        trainer, summary, module, started=started, overrides=overrides, resumed_from=ckpt_path
    )
    results.update(
        status=status,
        optimized_metric=cfg.get("optimized_metric"),
        skipped_steps=nonfinite.skipped,  # non-finite steps left out (nonfinite.max_skips)
    )
    if failure:
        results["reason"] = failure
    if transfer is not None:
        results["init_from"] = {"source": str(source.path), **transfer.summary()}
    try:
        write_results(run_dir, results)
    except DiskFull as e:  # the disk is still full: say why the run stopped, and this
        raise RunFailed(f"{failure}; {e}" if failure else str(e)) from None
    if failure:
        raise RunFailed(failure)
    if status == "interrupted":
        raise RunInterrupted(interrupted_message(stop_on_signal, run_dir, overrides))
    return results


def fit(
    trainer: L.Trainer, module: XfmrModule, datamodule: Any, *, ckpt_path: str | None, cfg: Any
) -> str | None:
    """Train; the reason the run failed (a loss that is not a number, a full disk, memory run
    out), or None. The checkpoints on disk are then the last ones written whole."""
    try:
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


def run_labels(datamodule: Any, run_dir: Path, *, save: bool) -> list[str]:
    """The data's label set (classification, tagging), kept in RUN_DIR/labels.json so the run
    is used with the labels it was trained on however the data changes later. A run directory
    that already holds other labels (a resume on changed data) is refused."""
    labels = datamodule.label_names()
    saved = read_labels(run_dir)
    if saved is not None and saved != labels:
        raise UserError(
            f"the data's labels {_few(labels)} differ from {run_dir / LABELS_FILE}'s "
            f"{_few(saved)}, which this run was trained on: train in a new run directory, or "
            f"give data.labels=[{','.join(saved)}]"
        )
    if saved is None and save:
        write_json(run_dir / LABELS_FILE, labels)
    return labels


def _few(labels: list[str], limit: int = 8) -> str:
    shown = ", ".join(labels[:limit]) + (
        f", ... ({len(labels)} in all)" if len(labels) > limit else ""
    )
    return f"[{shown}]"


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
    return (
        f"{stop.signal_name or 'interrupted'}: stopped after step {stop.stopped_at}, state saved "
        f"to {stop.checkpoint}; resume with: {' '.join(command)}"
    )


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    """Strict JSON (a metric that is not a number is null), written to a temporary name and
    renamed, so a reader sees the old file or the new one, never half of one."""
    write_json(run_dir / RESULTS_FILE, results)


def _instantiate_all(section: DictConfig | None) -> list[Any]:
    """Each entry of a dict-of-targets section; `name: null` switches one off."""
    return [instantiate(item) for item in (section or {}).values() if item is not None]


_NOISE = ("litlogger", "`weights_only` was not set", "GPU available:", "TPU available:")


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


def prepare_tokenizer(
    cfg: DictConfig,
    datamodule: Any,
    run_dir: Path,
    *,
    cache_only: bool = False,
    special_tokens: tuple[str, ...] = (),
    pretrained: Path | None = None,
) -> TextTokenizer:
    """The run's own `tokenizer.json` if it has one (resume, DDP workers); else train or reuse a
    cached one for the same training text and settings, and copy it into the run directory.

    The training text is the head of the training split, at most `tokenizer.train_sample_mb`,
    read a chunk at a time (`xfmr.text.sample`); the cache key is that text's fingerprint, since
    it and the settings alone decide the tokenizer."""
    own = run_dir / "tokenizer.json"
    if own.is_file():
        return TextTokenizer.load(own)
    if pretrained is not None:  # the checkpoint's own vocabulary
        tokenizer = TextTokenizer.load(pretrained)
        missing = [t for t in special_tokens if tokenizer.token_to_id(t) is None]
        if missing:
            raise UserError(
                f"init_from: the source's tokenizer {pretrained} lacks {missing}, which "
                f"objective={cfg.objective._target_.rsplit('.', 1)[-1]} needs; pretrain with a "
                f"tokenizer that has them (tokenizer=wordpiece, or list them in "
                f"tokenizer.special_tokens)"
            )
        tokenizer.save(own)
        return tokenizer
    if cache_only:
        raise RuntimeError(f"{own} is missing: rank 0 writes it before starting workers")
    settings = OmegaConf.to_container(cfg.tokenizer, resolve=True)
    # The objective's tokens ([MASK], sentinels, ...) join the tokenizer's own specials.
    listed = list(settings.get("special_tokens") or [])
    settings["special_tokens"] = listed + [t for t in special_tokens if t not in listed]
    spec = TokenizerSpec(**settings)
    max_bytes = round(spec.train_sample_mb * BYTES_PER_MB)
    sample = survey(datamodule, max_bytes) if spec.kind != "pretrained" else None
    if sample is not None and not sample.whole:
        _warn_partial_sample(spec, sample.n_bytes)
    tokenizer, cached = fit_or_load(
        spec,
        training_text(datamodule, max_bytes),  # read only if no cached tokenizer matches
        data_fingerprint=sample.fingerprint if sample else "",
        cache_dir=cfg.paths.cache_dir,
    )
    log.info(
        "tokenizer: %s, vocabulary %d (%s)",
        spec.kind,
        tokenizer.vocab_size,
        "cached" if cached else "trained",
    )
    tokenizer.save(own)
    return tokenizer


def _warn_partial_sample(spec: TokenizerSpec, n_bytes: int) -> None:
    unk = f"; characters seen only after it become {spec.unk_token}" if spec.kind == "char" else ""
    log.warning(
        "tokenizer: trained on the first %.3g MB of the training split "
        "(tokenizer.train_sample_mb=%s)%s",
        n_bytes / BYTES_PER_MB,
        spec.train_sample_mb,
        unk,
    )


def resolve_checkpoint(
    ckpt_path: str | None, run_dir: Path, model_config: dict[str, Any]
) -> str | None:
    """`ckpt_path` if given, else the newest of the run directory's `last.ckpt` and periodic
    `step-*.ckpt`, if any; checked before any training so a wrong file fails fast and nothing
    already saved is touched."""
    if not ckpt_path:
        newest = newest_checkpoint(run_dir / "checkpoints")
        if newest is None:
            return None
        ckpt_path = str(newest)
    path = Path(ckpt_path)
    if not path.is_file():
        raise UserError(
            f"ckpt_path={ckpt_path!r} does not exist: give a .ckpt file written by xfmr-train"
        )
    if path.suffix == SAFETENSORS_SUFFIX:
        raise UserError(
            f"ckpt_path={ckpt_path!r} holds weights only, no optimizer or loop state to resume: "
            f"start a new run from it with init_from={ckpt_path}"
        )
    saved = read_checkpoint(path, key="ckpt_path", mmap=True)["hyper_parameters"]["model_config"]
    differs = sorted(
        k for k in set(saved) | set(model_config) if saved.get(k) != model_config.get(k)
    )
    if differs:
        detail = ", ".join(
            f"{k}: checkpoint {saved.get(k)!r} vs config {model_config.get(k)!r}" for k in differs
        )
        raise UserError(f"ckpt_path={ckpt_path!r} was trained with a different model ({detail})")
    return str(path)


def newest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint a run resumes from: the last written of `last.ckpt` and `step-*.ckpt`
    (every one is written whole, then renamed into place)."""
    found = [p for p in (directory / "last.ckpt", *directory.glob("step-*.ckpt")) if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)


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
        "mfu": round(mfu, 5) if mfu is not None else None,
        "world_size": trainer.world_size,
        "threads": torch.get_num_threads(),
        "n_parameters": sum(p.numel() for p in module.model.parameters()),
        "overrides": list(overrides),
        "resumed_from": resumed_from,
        "history": summary.history,
    }
