"""Readers for common dataset file formats, one module each: parallel text (`parallel`),
TSV/CSV/JSONL (`delimited`), CoNLL (`conll`), SQuAD v1.1 (`squad`).

Pure Python (no torch): each reader returns plain dataclasses plus a `BadRows` report
(`bad_rows`). Every reader takes `on_bad_row`: "error" (default) raises `UserError` at the first
bad row, naming `file:line` (or the SQuAD question id), what is wrong and what is valid; "skip"
drops the row and records it in the returned `BadRows`, so nothing vanishes without a trace.
"""
