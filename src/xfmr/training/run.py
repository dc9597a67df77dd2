"""`run_training(config)`: build the parts a run's config names, fit them, write `results.json`.

Kept apart from the entry (`xfmr.api`) so that DDP workers and tests train through the same code
as `xfmr-train` and `xfmr.train` (which reach it through `xfmr.api.training.fit`). The config
arrives checked and resolved (`xfmr.config`); what only the run can choose (the width for
`model.target_params`, the checkpoint it resumes) is chosen here, into a new `RunConfig` that
config.yaml records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch

from xfmr.config import RunConfig
from xfmr.config.options import AUTO_COMPILE
from xfmr.config.trainer import AUTO_PRECISION
from xfmr.devices import cuda_available, device_count
from xfmr.errors import UserError
from xfmr.files import atomic_path
from xfmr.nn.config import ModelConfig
from xfmr.parts.build import Parts, Plan, build_parts
from xfmr.parts.sources import init_source, saved_width
from xfmr.parts.transfer import freeze_backbone, initialise_from, pretrained_model_config
from xfmr.run_dir.cluster import slurm_restarts
from xfmr.run_dir.files import CONFIG_FILE
from xfmr.run_dir.lock import is_global_rank_zero
from xfmr.targets import plain
from xfmr.training.compiling import auto_mode
from xfmr.training.fitting import fit_run, tidy_lightning_logging
from xfmr.training.guards import NonFiniteGuard
from xfmr.training.module import XfmrModule
from xfmr.training.results import finish, summarize
from xfmr.training.resume import resolve_checkpoint

log = logging.getLogger("xfmr")


def run_training(
    config: RunConfig, *, is_worker: bool = False, overrides: Sequence[str] = ()
) -> dict[str, Any] | None:
    """Train the checked experiment `config` in its run directory; returns what it writes to
    `results.json` (None on DDP workers).

    The caller holds the run directory's lock (`xfmr.api.training.fit`, the path of
    `xfmr-train` and `xfmr.train`); DDP workers train beside the process that holds it.
    """
    assert config.trainer.precision != AUTO_PRECISION, "xfmr.config resolves trainer.precision"
    started = time.time()
    run_dir = config.run_dir
    plan = plan_training(config)  # a bad init_from fails before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    tidy_lightning_logging()
    L.seed_everything(config.seed, workers=True, verbose=False)
    # Rank 0 writes the run directory; the other ranks (xfmr's DDP workers, and those torchrun
    # or SLURM started, on this node or others) read what it wrote.
    writes = not is_worker and is_global_rank_zero()
    parts = build_parts(
        plan, data=config.data, is_worker=not writes, window=config.trainer.accumulate
    )
    ckpt_path = resolve_checkpoint(config.ckpt_path, run_dir, parts.model_config)
    config = chosen(config, parts.model_config, ckpt_path)
    if config.compile == AUTO_COMPILE:
        config = compile_chosen(config, parts, say=writes)
    if writes:
        save_config(config)
    nonfinite = NonFiniteGuard(max_skips=config.nonfinite.max_skips)
    module = training_module(config, parts, nonfinite)
    transfer = None
    if plan.init and not ckpt_path:  # a resumed run already holds the transferred weights
        transfer = initialise_from(module.model, plan.init)
    if config.finetune.freeze_backbone:
        freeze_backbone(module.model)
    fitted = fit_run(config, parts, module, ckpt_path=ckpt_path, is_worker=is_worker)
    if is_worker or fitted.trainer.global_rank != 0:
        return None
    results = summarize(
        fitted, module, started=started, overrides=overrides, resumed_from=ckpt_path
    )
    results.update(
        status=fitted.status,
        optimized_metric=config.optimized_metric,
        skipped_steps=nonfinite.skipped,  # non-finite steps left out (nonfinite.max_skips)
        resolved=plain(config.resolved),  # each value the run chose, with what was given
    )
    if fitted.failure:
        results["reason"] = fitted.failure
    if transfer is not None:
        results["init_from"] = {"source": str(plan.init.path), **transfer.summary()}
    if fitted.requeue is not None and fitted.requeue.job is not None:
        results.update(slurm_job_id=fitted.requeue.job, slurm_restart_count=slurm_restarts())
    return finish(run_dir, results, fitted, overrides)


def plan_training(config: RunConfig) -> Plan:
    """Where each part of the run in `config.run_dir` comes from; a Hugging Face `init_from`
    decides the model's shape."""
    source = init_source(config.init_from)
    model_config = None
    if source is not None and source.kind == "hf":
        model_config = pretrained_model_config(
            source.path, config.model, config.data.get("block_size")
        )
    return Plan(
        model=config.model,
        objective=config.objective,
        tokenizer=config.tokenizer,
        data=config.data,
        run_dir=config.run_dir,
        cache_dir=config.paths.cache_dir,
        finished=False,
        init=source,
        model_config=model_config,
        kept_width=saved_width(config.run_dir, config.model),
    )


def chosen(config: RunConfig, built: ModelConfig, ckpt_path: str | None) -> RunConfig:
    """`config` with what the run chose: the width for `model.target_params`, and the
    checkpoint it resumes (`ckpt_path`), each named in `resolved` with what was given."""
    resolved: dict[str, Any] = {}
    model = config.model
    if model.target_params is not None and built.d_model != model.d_model:
        try:
            model = ModelConfig.from_section({**model.settings(), "d_model": built.d_model})
        except ValueError as e:
            raise UserError(f"model: {e}") from None
        resolved["model.d_model"] = {"target_params": config.model.target_params}
    if ckpt_path != config.ckpt_path:
        resolved["ckpt_path"] = config.ckpt_path
    return config.replace(resolved, model=model, ckpt_path=ckpt_path)


def compile_chosen(config: RunConfig, parts: Parts, *, say: bool) -> RunConfig:
    """`config` with compile=auto's choice for this run (`auto_mode`), said in one line."""
    trainer = config.trainer
    cuda = trainer.accelerator in ("auto", "gpu", "cuda") and cuda_available()
    devices = device_count(trainer.devices)  # checked with the config
    nodes = int(trainer.get("num_nodes") or 1)
    if devices is None and cuda:  # auto and -1: every GPU
        devices = torch.cuda.device_count()
    processes = None if devices is None else devices * nodes
    fixed = bool(getattr(parts.datamodule, "fixed_batch_shape", False))
    mode, line = auto_mode(cuda=cuda, processes=processes, fixed_shapes=fixed)
    if say and line:
        log.info(line)
    return config.replace({"compile": AUTO_COMPILE}, compile=mode)


def save_config(config: RunConfig) -> None:
    """The run's config, with what the run chose, in RUN_DIR/config.yaml."""
    with atomic_path(config.run_dir / CONFIG_FILE) as temporary:
        temporary.write_text(config.to_yaml(), encoding="utf-8")
    if config.ckpt_path:
        log.info("resuming from %s", config.ckpt_path)


def training_module(config: RunConfig, parts: Parts, nonfinite: NonFiniteGuard) -> XfmrModule:
    return XfmrModule(
        model=parts.model,
        model_config=parts.model_config.to_dict(),
        objective=parts.objective,
        optimizer=config.optim.target.build(),
        scheduler=config.schedule.target.build() if config.schedule else None,
        backbone_lr_scale=config.finetune.backbone_lr_scale,
        compile=config.compile,
        nonfinite_guard=nonfinite,
        accumulate=config.trainer.accumulate,
        gradient_clip_val=config.trainer.get("gradient_clip_val"),
        gradient_clip_algorithm=config.trainer.get("gradient_clip_algorithm"),
    )
