"""The parts of a run, built in one place: tokenizer, data, objective and model.

First a `Plan` says where each part comes from (the run directory, `init_from`, a Hugging Face
checkpoint, or the config's sections), resolved once; then `build_parts` builds from the plan,
top to bottom. Training plans a new or resumed run (`xfmr.training.run`); everything that uses a
finished run plans from its directory and checkpoint (`xfmr.runs.loading`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from xfmr.data.config import DataConfig
from xfmr.data.order import CountedCollate
from xfmr.errors import UserError
from xfmr.nn import ModelConfig
from xfmr.nn.sizing import sized
from xfmr.objectives.config import ObjectiveConfig
from xfmr.objectives.contract import Objective
from xfmr.objectives.packing import PackedCollate
from xfmr.parts.labels import run_labels, trained_labels
from xfmr.parts.sources import InitSource
from xfmr.parts.tokenizer import prepare_tokenizer
from xfmr.run_dir.files import TOKENIZER_FILE
from xfmr.text.tokenizers import TextTokenizer, TokenizerSpec

log = logging.getLogger("xfmr")


@dataclass(frozen=True)
class Plan:
    """Where each part of a run comes from.

    Args:
        model, objective, tokenizer, data: the run's sections.
        run_dir: the run directory: its tokenizer.json and labels.json are the run's own.
        cache_dir: where fitted tokenizers are cached (`paths.cache_dir`).
        finished: a finished run is used (its tokenizer and labels are read, never written);
            else a run is trained (the tokenizer is fitted or cached if the run has none).
        init: the weights a new run starts from (`init_from`), or None.
        model_config: the model's shape where the config does not decide it: the finished
            run's checkpoint, or init_from's Hugging Face checkpoint; None: the `model`
            section, with the tokenizer's vocabulary (and, with `model.target_params`, the
            width that gives that many parameters).
        kept_width: the width a run resumed in `run_dir` chose for `model.target_params`,
            kept while it still gives that many parameters (another version of xfmr, or a
            changed config, must not resume a checkpoint as another shape).
    """

    model: ModelConfig
    objective: ObjectiveConfig
    tokenizer: TokenizerSpec
    data: DataConfig
    run_dir: Path
    cache_dir: str | None
    finished: bool
    init: InitSource | None = None
    model_config: ModelConfig | None = None
    kept_width: int | None = None


@dataclass
class Parts:
    """A run's parts, bound to each other: the objective knows the tokenizer's ids and the
    label set, the data (if built) is encoded by the tokenizer and batched by the objective, and
    the model is the objective's (with its task head), with fresh weights."""

    tokenizer: TextTokenizer
    objective: Objective
    datamodule: Any | None
    model_config: ModelConfig
    model: nn.Module


def build_parts(
    plan: Plan, *, data: DataConfig | None = None, is_worker: bool = False, window: int = 1
) -> Parts:
    """Build the run's parts from `plan`; `data` (the data section, or an evaluation's) is
    built and attached when given, its training batches `window` to an optimizer step. A DDP
    worker (`is_worker`) reads what rank 0 wrote and writes nothing."""
    objective: Objective = plan.objective.build()
    # A finished run's labels come from its labels.json; a training run's from its data, below.
    finished_labels = plan.finished and objective.uses_labels
    labels = trained_labels(plan.data, plan.run_dir) if finished_labels else None
    datamodule = data_module(data, labels) if data is not None else None
    tokenizer = _tokenizer(plan, objective, datamodule, is_worker=is_worker)
    objective.bind(tokenizer)
    if objective.uses_labels:  # the label set is the data's, known once it is read
        if labels is None:
            labels = run_labels(datamodule, plan.run_dir, save=not is_worker)
        objective.bind_labels(labels)
    if datamodule is not None:
        # Each batch with its loss terms' counts (what gradient accumulation divides by).
        collate = (
            PackedCollate(objective) if getattr(datamodule, "packing", False) else objective.collate
        )
        datamodule.attach(tokenizer, CountedCollate(collate, objective.counts), window=window)
    model_config = plan.model_config or _model_config(
        plan, tokenizer.vocab_size, objective, announce=not is_worker
    )
    if model_config.padded_vocab_size != model_config.vocab_size and not is_worker:
        log.info(
            "model.vocab_multiple=%d: the vocabulary's %d tokens take %d rows",
            model_config.vocab_multiple,
            model_config.vocab_size,
            model_config.padded_vocab_size,
        )
    if (
        plan.init is not None
        and plan.init.kind == "hf"
        and model_config.arch not in objective.archs
    ):
        raise UserError(
            f"init_from=hf:{plan.init.path} is an arch={model_config.arch} model; "
            f"objective={objective.name} trains arch in {list(objective.archs)}"
        )
    model = objective.build_model(model_config)
    return Parts(tokenizer, objective, datamodule, model_config, model)


def _model_config(
    plan: Plan, vocab_size: int, objective: Objective, *, announce: bool
) -> ModelConfig:
    """The config's model at the tokenizer's vocabulary; with `model.target_params`, at the
    width that gives that many parameters (`xfmr.nn.sizing`), said in one line."""
    if plan.model.target_params is None:
        return plan.model.with_vocab(vocab_size)
    try:
        found = sized(
            plan.model.settings(),
            vocab_size=vocab_size,
            build=objective.build_model,
            keep=plan.kept_width,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    if announce:
        log.info(found.line())
    return found.config


def data_module(data: DataConfig, labels: list[str] | None = None) -> Any:
    """The data group's module; with `labels`, a label's index is its place in that list (the
    label set a finished run was trained on), not in the data's own."""
    return data.build(**({"labels": labels} if labels else {}))


def _tokenizer(
    plan: Plan, objective: Objective, datamodule: Any | None, *, is_worker: bool
) -> TextTokenizer:
    if plan.finished:
        return TextTokenizer.load(plan.run_dir / TOKENIZER_FILE)
    return prepare_tokenizer(
        plan.tokenizer,
        datamodule,
        plan.run_dir,
        cache_dir=plan.cache_dir,
        objective=plan.objective.name,
        cache_only=is_worker,
        special_tokens=objective.required_special_tokens,
        pretrained=plan.init.tokenizer if plan.init else None,
    )
