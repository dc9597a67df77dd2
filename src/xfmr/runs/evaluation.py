"""Evaluating a trained run on the validation split of its data: loss and perplexity through
the run's own objective (as validation computes them), and for seq2seq corpus BLEU of the
decoded, detokenized outputs against the raw reference lines (sacreBLEU's 13a tokenization)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig

from xfmr.data.parallel import ParallelDataModule
from xfmr.errors import UserError
from xfmr.generation import GenerationConfig
from xfmr.objectives.common import IGNORE_INDEX
from xfmr.parts.build import data_module
from xfmr.runs.inference import generate_rows, hypothesis_text, text_task
from xfmr.runs.loading import LoadedRun

Progress = Callable[[int], None]  # called with how many examples were just done


def attach_data(run: LoadedRun, data_config: DictConfig) -> Any:
    """The data module of `data_config`, encoded with the run's tokenizer and batched by its
    objective, as training built it."""
    # The run's own label set: a label's index is the one the model was trained with.
    labels = run.objective.label_names if run.objective.uses_labels else None
    datamodule = data_module(data_config, labels)
    datamodule.attach(run.tokenizer, run.objective.collate)
    return datamodule


@torch.no_grad()
def evaluate_loss(run: LoadedRun, loader: Any, *, on_batch: Progress | None = None) -> dict:
    """Mean loss over every counted target (labels != IGNORE_INDEX) of `loader`, weighted as
    validation weights it; perplexity = exp(loss) for token-level objectives, the objective's
    own metrics (e.g. accuracy) otherwise."""
    objective = run.objective
    metrics = None if objective.by_perplexity else objective.metrics()
    total, counted, examples = 0.0, 0, 0
    for batch in loader:
        batch = {k: v.to(run.device) for k, v in batch.items()}
        loss, logits = objective.forward(run.model, batch)
        count = int((batch["labels"] != IGNORE_INDEX).sum())
        total += float(loss) * count
        counted += count
        examples += len(batch["labels"])
        if metrics is not None:
            objective.update_metrics(metrics, logits.cpu(), {k: v.cpu() for k, v in batch.items()})
        if on_batch is not None:
            on_batch(len(batch["labels"]))
    if not counted:
        raise UserError("the validation split has no counted targets: nothing to evaluate")
    loss = total / counted
    result: dict[str, Any] = {"loss": loss, "examples": examples, "targets": counted}
    if metrics is None:
        result["perplexity"] = math.exp(loss)
    else:
        result.update({name: float(metric.compute()) for name, metric in metrics.items()})
    return result


def validation_pairs(datamodule: Any) -> tuple[list[list[int]], list[str]]:
    """(encoded validation sources, as training cut them; raw reference lines)."""
    if not isinstance(datamodule, ParallelDataModule):  # raw references kept beside the ids
        raise UserError(
            f"BLEU needs source -> target data; data {type(datamodule).__name__} gives none "
            "(set bleu=false for loss and perplexity only)"
        )
    sources = [source for source, _ in datamodule.val_pairs]
    references = [target for _, target in datamodule.pairs()[1]]
    return sources, references


def translate_validation(
    run: LoadedRun,
    datamodule: Any,
    *,
    config: GenerationConfig,
    batch_size: int,
    on_batch: Progress | None = None,
) -> tuple[list[str], list[str]]:
    """The best hypothesis for every validation source as text, and the raw references."""
    task = text_task(run)
    sources, references = validation_pairs(datamodule)
    rows = [[*source, *task.source_suffix] for source in sources]
    hypotheses = generate_rows(
        run, task, rows, config=config, batch_size=batch_size, on_batch=on_batch
    )
    outputs = [
        hypothesis_text(run, task, row, best[0]) for row, best in zip(rows, hypotheses, strict=True)
    ]
    return outputs, references


def corpus_bleu(outputs: list[str], references: list[str]) -> float:
    """Corpus BLEU on sacreBLEU's 0-100 scale (torchmetrics' SacreBLEUScore, 13a tokenization,
    one reference per output; Papineni et al. 2002, Post 2018)."""
    from torchmetrics.text import SacreBLEUScore

    score = SacreBLEUScore(tokenize="13a")(outputs, [[reference] for reference in references])
    return 100.0 * float(score)
