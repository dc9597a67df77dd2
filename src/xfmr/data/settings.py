"""What a data group's settings must hold, checked before anything heavy loads: by
`xfmr.data.config` when the run's config is read, and by the data modules themselves when built
directly.
Nothing here imports torch."""

from __future__ import annotations

from typing import Any

from xfmr.errors import UserError
from xfmr.ranges import WORKERS

HF_PATH_CHOICES = (
    "give a hub dataset name, a local dataset directory, or a builder (json, csv, text, "
    "parquet) with data.data_files"
)
_ALIGNED_FILES = ("train_source", "train_target", "val_source", "val_target")
_JSONL_FILES = ("train_path", "val_path")
AUTO_WORKERS = "auto"  # data.num_workers chosen for the device when the loaders are built


class ChosenWorkers(int):
    """A `data.num_workers` that `auto` became when the run's config was read (for the device
    it trains on): a number, that the loaders treat as chosen for them, not given by a person
    (they say why in a line, and a stream caps it at its shards)."""


def check_num_workers(num_workers: Any) -> int | str:
    """`data.num_workers`: loader worker processes, or auto; the config check
    (`xfmr.ranges`) asks the same of the composed config."""
    if not WORKERS.accepts(num_workers):
        raise UserError(f"data.num_workers={num_workers!r} is not valid: use {WORKERS.describe()}")
    return num_workers


def parallel_files(data: Any) -> tuple[str, ...]:
    """The keys of the one way parallel data is given: four aligned line files, or two JSONL
    files (`train_path`, `val_path`); anything else is a UserError."""
    given = tuple(key for key in (*_ALIGNED_FILES, *_JSONL_FILES) if data.get(key))
    if given not in (_ALIGNED_FILES, _JSONL_FILES):
        raise UserError(
            "data=parallel takes exactly one of: train_source, train_target, val_source and "
            "val_target (aligned text files), or train_path and val_path (JSONL, one object "
            f"per line with data.source_field and data.target_field); set: {list(given)}"
        )
    return given


def check_text_documents(data: Any) -> None:
    """A text corpus's documents (`data.document_separator`, `data.documents_per_file`) are
    well given, and `data.packing=true` has documents to keep apart."""
    separator, per_file = data.get("document_separator"), data.get("documents_per_file", False)
    if separator is not None and (not isinstance(separator, str) or not separator):
        raise UserError(
            f"data.document_separator={separator!r} is not valid: give a non-empty string "
            "(e.g. '<|endoftext|>', or '\\n\\n\\n' for two blank lines) or null (no documents)"
        )
    if not isinstance(per_file, bool):
        raise UserError(f"data.documents_per_file={per_file!r} is not valid: use true or false")
    if data.get("packing") and separator is None and not per_file:
        raise UserError(
            "data.packing=true: a text corpus packs documents, and this one has none; set "
            "data.document_separator (e.g. '<|endoftext|>') or data.documents_per_file=true, "
            "or leave data.packing=false"
        )


SPECIAL_TOKENS_PER_WINDOW = 3  # data=squad: [CLS] question [SEP] context [SEP]


def check_squad_windows(data: Any) -> None:
    """data=squad's windows leave room for context after the question and the special tokens,
    and consecutive windows start a positive number of tokens apart."""
    max_length, query = data.get("max_length"), data.get("max_query_length")
    for key, value in (("max_length", max_length), ("max_query_length", query)):
        if not isinstance(value, int) or value < 1:
            raise UserError(f"data.{key}={value!r} must be a positive number of tokens")
    if max_length - query - SPECIAL_TOKENS_PER_WINDOW < 1:
        raise UserError(
            f"data.max_length={max_length} leaves no context tokens after "
            f"data.max_query_length={query} question tokens and {SPECIAL_TOKENS_PER_WINDOW} "
            f"special tokens: set data.max_length>={query + SPECIAL_TOKENS_PER_WINDOW + 1} "
            "or lower data.max_query_length"
        )
    stride = data.get("doc_stride")
    if stride is not None and stride < 1:
        raise UserError(
            f"data.doc_stride={stride} must be a positive number of tokens, or null to keep "
            "only the first window of a long context"
        )
