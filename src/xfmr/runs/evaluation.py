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
import torch.nn.functional as F

from xfmr.data.config import DataConfig
from xfmr.data.parallel import ParallelDataModule
from xfmr.errors import UserError
from xfmr.files import atomic_write_text
from xfmr.generation import GenerationConfig
from xfmr.nn.positions import extend_positions
from xfmr.objectives.common import IGNORE_INDEX, token_losses
from xfmr.objectives.terms import TermLoss, loss_sums
from xfmr.parts.build import data_module
from xfmr.runs.evaluation_data import outputs_path
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
    data_config: DataConfig,
    *,
    config: GenerationConfig,
    batch_size: int,
    seed: int,
    bleu: bool,
    report_path: Path,
    by_position: bool = False,
    progress: ProgressBar = no_progress,
) -> dict[str, Any]:
    """xfmr-eval's report, to be written at `report_path`: loss and the objective's metrics on
    the validation split of `data_config` (whose `block_size` may be longer than the run
    trained on); with `by_position`, a causal LM's loss at each position of the windows, written
    beside the report as a CSV and a plot; for a seq2seq run (with `bleu`) corpus BLEU of its
    decoded outputs, which are written beside it too."""
    started = time.time()
    fit_positions(run, data_config)
    torch.manual_seed(seed)  # the objective's draws while batching (masking, corruption)
    datamodule = attach_data(run, data_config)
    loader = datamodule.val_dataloader()
    with progress(len(loader.dataset), "loss") as advance:
        metrics = evaluate_loss(run, loader, on_batch=advance, by_position=by_position)
    if by_position:
        metrics["by_position"] = _write_by_position(run, metrics["by_position"], report_path)
    report = {
        "run_dir": str(run.files.run_dir),
        "checkpoint": str(run.files.checkpoint),
        "global_step": run.global_step,
        "objective": getattr(run.objective, "name", type(run.objective).__name__),
        "data": data_config.to_dict(),
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
        outputs = outputs_path(report_path)
        atomic_write_text(outputs, "".join(f"{line}\n" for line in decoded))
        report.update(
            bleu=corpus_bleu(decoded, references), bleu_tokenize="13a", outputs=str(outputs)
        )
    report["wall_time_s"] = round(time.time() - started, 3)
    return report


def _write_by_position(run: LoadedRun, by_position: dict, report_path: Path) -> dict:
    from xfmr.runs.by_position import by_position_paths, write_by_position

    trained = int(run.config.data.get("block_size"))
    csv_path, png_path = by_position_paths(report_path)
    pos = run.model_config.pos.name
    files = write_by_position(
        by_position,
        trained=trained,
        csv_path=csv_path,
        png_path=png_path,
        title=f"{run.files.run_dir.name}: loss by position over {by_position['targets'][0]} "
        f"windows (pos={pos}, trained at {trained})",
    )
    return {"pos": pos, **files}


def coverage(datamodule: Any) -> dict:
    """How much of the validation split the figures read, for data that reads a budget."""
    read = getattr(datamodule, "val_coverage", None)
    return {"val_coverage": read()} if read is not None else {}


def attach_data(run: LoadedRun, data_config: DataConfig) -> Any:
    """The data module of `data_config`, encoded with the run's tokenizer and batched by its
    objective, as training built it."""
    # The run's own label set: a label's index is the one the model was trained with.
    labels = run.objective.label_names if run.objective.uses_labels else None
    datamodule = data_module(data_config, labels)
    datamodule.attach(run.tokenizer, run.objective.collate)
    return datamodule


def fit_positions(run: LoadedRun, data_config: DataConfig) -> None:
    """Ready the model's positional schemes for windows of `data.block_size` tokens, which may
    be longer than the run trained on: a sinusoid table grows; a learned table that is too short
    is a UserError (`xfmr.runs.evaluation_data.check_length` says so before torch loads, from
    the config)."""
    length = data_config.get("block_size")
    if length is None:
        return
    try:
        extend_positions(run.model, int(length))
    except ValueError as e:
        raise UserError(f"data.block_size={length}: {e}") from None


class PositionTotals:
    """The loss summed at each position t of the batches' rows, and how many targets counted
    there (labels != IGNORE_INDEX): a causal LM's loss given t + 1 tokens of context."""

    def __init__(self) -> None:
        self.sums = torch.zeros(0, dtype=torch.float64)
        self.counts = torch.zeros(0, dtype=torch.int64)

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """logits (B, T, V), labels (B, T); rows of another length than earlier ones pad."""
        losses = token_losses(logits, labels).double().sum(0).cpu()  # (T,)
        counts = (labels != IGNORE_INDEX).sum(0).cpu()  # (T,)
        length = max(len(self.sums), len(losses))
        self.sums = _pad_to(self.sums, length) + _pad_to(losses, length)
        self.counts = _pad_to(self.counts, length) + _pad_to(counts, length)

    def result(self) -> dict[str, list]:
        """`loss`: the mean at each position (None where nothing counted); `targets`: counts."""
        counts = self.counts.tolist()
        sums = self.sums.tolist()
        return {
            "loss": [s / c if c else None for s, c in zip(sums, counts, strict=True)],
            "targets": counts,
        }


def _moved(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _pad_to(values: torch.Tensor, length: int) -> torch.Tensor:
    return F.pad(values, (0, length - len(values)))


@torch.no_grad()
def evaluate_loss(
    run: LoadedRun, loader: Any, *, on_batch: Progress | None = None, by_position: bool = False
) -> dict:
    """The loss over every counted target of `loader`, as validation takes it: per loss term,
    its sum over the split over the term's count, added over the terms
    (`xfmr.objectives.terms`); perplexity = exp(loss) for token-level objectives, the
    objective's own metrics (e.g. accuracy) otherwise. `targets`: the first term's count (the
    labels that count), with every term's loss and count under `terms` where there are more.
    `by_position`: also the mean loss at each position of the rows (`PositionTotals.result`)."""
    objective = run.objective
    metrics = None if objective.by_perplexity else objective.metrics()
    positions = PositionTotals() if by_position else None
    terms = TermLoss(objective.loss_terms).to(run.device)
    examples = 0
    for batch in loader:
        batch = _moved(batch, run.device)  # tensors; a QA batch's SpanSources stays as is
        loss, logits = objective.forward(run.model, batch)
        counts = objective.counts(batch)
        terms.update(loss_sums(objective.name, loss, counts), counts)
        examples += len(batch["labels"])
        if metrics is not None:
            on_host = tuple(t.cpu() for t in logits) if isinstance(logits, tuple) else logits.cpu()
            objective.update_metrics(metrics, on_host, _moved(batch, torch.device("cpu")))
        if positions is not None:
            positions.add(logits, batch["labels"])
        if on_batch is not None:
            on_batch(len(batch["labels"]))
    counted = terms.counts.tolist()
    if not sum(counted):
        raise UserError("the validation split has no counted targets: nothing to evaluate")
    loss = float(terms.compute())
    result: dict[str, Any] = {"loss": loss, "examples": examples, "targets": counted[0]}
    if len(counted) > 1:
        sums = terms.sums.tolist()
        result["terms"] = {
            term: {"loss": total / count if count else None, "targets": count}
            for term, total, count in zip(objective.loss_terms, sums, counted, strict=True)
        }
    if metrics is None:
        result["perplexity"] = math.exp(loss)
    else:
        result.update({name: float(metric.compute()) for name, metric in metrics.items()})
    if positions is not None:
        result["by_position"] = positions.result()
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
