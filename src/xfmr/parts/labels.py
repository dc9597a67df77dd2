"""The label set of a classification or tagging run: the data's when it trains, kept in
RUN_DIR/labels.json, and read back from there by everything that uses the run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from xfmr.data.config import DataConfig
from xfmr.errors import UserError
from xfmr.files import write_json
from xfmr.run_dir.files import LABELS_FILE, read_labels

log = logging.getLogger("xfmr")


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


def trained_labels(data: DataConfig, run_dir: Path) -> list[str]:
    """The labels the run was trained on, from its labels.json. A run written before runs kept
    them is given its training data's labels again, with a warning: they are right only if
    that data has not changed since."""
    labels = read_labels(run_dir)
    if labels is not None:
        return labels
    log.warning(
        "%s has no %s (written by an older xfmr-train): reading the label set from the "
        "training data again, which is right only if the data has not changed since",
        run_dir,
        LABELS_FILE,
    )
    return data.build().label_names()
