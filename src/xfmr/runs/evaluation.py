"""Evaluating a trained run on the validation split of its data: loss and perplexity through
the run's own objective (as validation computes them), and for seq2seq corpus BLEU of the
decoded, detokenized outputs against the raw reference lines (sacreBLEU's 13a tokenization)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from xfmr.data.parallel import ParallelDataModule
from xfmr.errors import UserError
from xfmr.files import atomic_write_text
from xfmr.generation import GenerationConfig
from xfmr.objectives.common import IGNORE_INDEX
from xfmr.parts.build import data_module
from xfmr.runs.inference import generate_rows, hypothesis_text, text_task
from xfmr.runs.loading import LoadedRun

Progress = Callable[[int], None]  # called with how many examples were just done
# A progress display for `total` items under a description, yielding its Progress.
ProgressBar = Callable[[int, str], AbstractContextManager[Progress]]


@contextmanager
def no_progress(total: int, description: str) -> Iterator[Progress]:
    yield lambda done: None


def evaluation_report(
    run: LoadedRun,
    data_config: DictConfig,
    *,
    config: GenerationConfig,
    batch_size: int,
    seed: int,
    bleu: bool,
    outputs: Path,
    progress: ProgressBar = no_progress,
) -> dict[str, Any]:
    """xfmr-eval's report: loss and the objective's metrics on the validation split of
    `data_config`, and for a seq2seq run (with `bleu`) corpus BLEU of its decoded outputs,
    which are written to `outputs`."""
    started = time.time()
    torch.manual_seed(seed)  # the objective's draws while batching (masking, corruption)
    datamodule = attach_data(run, data_config)
    loader = datamodule.val_dataloader()
    with progress(len(loader.dataset), "loss") as advance:
        metrics = evaluate_loss(run, loader, on_batch=advance)
    report = {
        "run_dir": str(run.files.run_dir),
        "checkpoint": str(run.files.checkpoint),
        "global_step": run.global_step,
        "objective": getattr(run.objective, "name", type(run.objective).__name__),
        "data": OmegaConf.to_container(data_config, resolve=True),
        "seed": seed,
        **metrics,
        **coverage(datamodule),
        "generation": {**asdict(config), "batch_size": batch_size},
    }
    if bleu and report["objective"] == "seq2seq":
        with progress(len(datamodule.val_pairs), "decoding") as advance:
            decoded, references = translate_validation(
                run, datamodule, config=config, batch_size=batch_size, on_batch=advance
            )
        decoded = [line.replace("\n", " ") for line in decoded]  # one output per line
        atomic_write_text(outputs, "".join(f"{line}\n" for line in decoded))
        report.update(
            bleu=corpus_bleu(decoded, references), bleu_tokenize="13a", outputs=str(outputs)
        )
    report["wall_time_s"] = round(time.time() - started, 3)
    return report


def coverage(datamodule: Any) -> dict:
    """How much of the validation split the figures read, for data that reads a budget."""
    read = getattr(datamodule, "val_coverage", None)
    return {"val_coverage": read()} if read is not None else {}


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
