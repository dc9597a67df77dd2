"""Readers for common dataset file formats: parallel text, TSV/CSV/JSONL, CoNLL, SQuAD v1.1.

Pure Python (no torch): each reader returns plain dataclasses plus a `BadRows` report.
Every reader takes `on_bad_row`: "error" (default) raises `UserError` at the first bad row,
naming `file:line` (or the SQuAD question id), what is wrong and what is valid; "skip" drops the
row and records it in the returned `BadRows`, so nothing vanishes without a trace.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any, Literal

from xfmr.errors import UserError

OnBadRow = Literal["skip", "error"]
ON_BAD_ROW_CHOICES = ("skip", "error")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
DELIMITER_BY_SUFFIX = {".tsv": "\t", ".csv": ","}
DOCSTART = "-DOCSTART-"


# --------------------------------------------------------------------------- bad-row report


@dataclass(frozen=True)
class BadRow:
    """One row a reader could not use.

    Args:
        file: the file the row came from.
        reason: what is wrong with it and what would be valid.
        line: 1-based line number (line-based formats).
        key: where in a JSON document (SQuAD: the question id).
    """

    file: str
    reason: str
    line: int | None = None
    key: str | None = None

    @property
    def location(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}"
        return f"{self.file} ({self.key})" if self.key else self.file

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class BadRows:
    """The rows a reader skipped (on_bad_row="skip"); empty when every row was good."""

    rows: list[BadRow] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[BadRow]:
        return iter(self.rows)

    def counts(self) -> dict[str, int]:
        """Number of skipped rows per file."""
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.file] = counts.get(row.file, 0) + 1
        return counts

    def summary(self, first: int = 3) -> str:
        """How many rows of which file were skipped, and the first few reasons."""
        if not self.rows:
            return "no bad rows skipped"
        per_file = ", ".join(f"{n} in {file}" for file, n in self.counts().items())
        lines = [f"skipped {len(self.rows)} bad row(s): {per_file}"]
        lines += [f"  {row}" for row in self.rows[:first]]
        if len(self.rows) > first:
            lines.append(f"  ... and {len(self.rows) - first} more")
        return "\n".join(lines)


def _check_on_bad_row(on_bad_row: str) -> None:
    if on_bad_row not in ON_BAD_ROW_CHOICES:
        raise UserError(f"on_bad_row={on_bad_row!r} is not valid: use 'skip' or 'error'")


def _bad(bad_rows: BadRows, on_bad_row: str, row: BadRow) -> None:
    """Raise for on_bad_row="error", record the row for "skip"."""
    if on_bad_row == "error":
        raise UserError(f"{row} (pass on_bad_row='skip' to skip bad rows and report them)")
    bad_rows.rows.append(row)


# --------------------------------------------------------------------------- file access


def _existing_file(path: str | Path) -> Path:
    file = Path(path)
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        raise UserError(f"data file {str(file)!r} {what}: give an existing, non-empty file")
    if file.stat().st_size == 0:
        raise UserError(f"data file {str(file)!r} is empty")
    return file


def _read_text(file: Path) -> str:
    try:
        # utf-8-sig: a byte-order mark would otherwise hide the first header name.
        return file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"data file {str(file)!r} is not UTF-8 text: {e}") from None


def _lines(file: Path) -> list[str]:
    """The file's lines without line endings (\\n, \\r\\n and \\r all end a line)."""
    # Not str.splitlines: it also splits on \x1c, \u2028 and others that can sit inside text.
    text = _read_text(file).replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _jsonl_objects(
    file: Path, bad_rows: BadRows, on_bad_row: str
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; malformed lines are bad rows."""
    for number, line in enumerate(_lines(file), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            _bad(bad_rows, on_bad_row, BadRow(str(file), f"not valid JSON ({e.msg})", number))
            continue
        if not isinstance(obj, dict):
            reason = f"expected a JSON object, found {type(obj).__name__}"
            _bad(bad_rows, on_bad_row, BadRow(str(file), reason, number))
            continue
        yield number, obj


class _Problem(str):
    """A field value that is really the reason the field is unusable."""


def _json_text(obj: dict[str, Any], name: str, *, allow_number: bool = False) -> str:
    """obj[name] as a stripped non-empty string, or a `_Problem` saying why it is not one."""
    if name not in obj:
        return _Problem(f"missing field {name!r}; fields present: {sorted(obj)}")
    value = obj[name]
    if allow_number and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return _Problem(f"field {name!r} must be a string, found {type(value).__name__} {value!r}")
    if not value.strip():
        return _Problem(f"field {name!r} is empty")
    return value.strip()


# --------------------------------------------------------------------------- parallel text


def read_parallel(
    source_path: str | Path, target_path: str | Path, *, on_bad_row: OnBadRow = "error"
) -> tuple[list[tuple[str, str]], BadRows]:
    """Aligned line files (line i of source translates line i of target) -> [(source, target)].

    An empty line on either side is a bad row (reported with the source file's line number).
    """
    _check_on_bad_row(on_bad_row)
    source_file, target_file = _existing_file(source_path), _existing_file(target_path)
    sources, targets = _lines(source_file), _lines(target_file)
    if len(sources) != len(targets):
        raise UserError(
            f"parallel files are not aligned: {str(source_file)!r} has {len(sources)} lines but "
            f"{str(target_file)!r} has {len(targets)}; both must have one line per sentence pair"
        )
    pairs: list[tuple[str, str]] = []
    bad_rows = BadRows()
    for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1):
        empty = [
            str(f) for f, text in ((source_file, source), (target_file, target)) if not text.strip()
        ]
        if empty:
            reason = f"empty line in {' and '.join(empty)}; every line needs text on both sides"
            _bad(bad_rows, on_bad_row, BadRow(str(source_file), reason, number))
            continue
        pairs.append((source.strip(), target.strip()))
    return pairs, bad_rows


def read_parallel_jsonl(
    path: str | Path,
    source_field: str = "source",
    target_field: str = "target",
    *,
    on_bad_row: OnBadRow = "error",
) -> tuple[list[tuple[str, str]], BadRows]:
    """JSON Lines with one {source_field: ..., target_field: ...} object per line."""
    _check_on_bad_row(on_bad_row)
    file = _existing_file(path)
    pairs: list[tuple[str, str]] = []
    bad_rows = BadRows()
    for number, obj in _jsonl_objects(file, bad_rows, on_bad_row):
        source, target = _json_text(obj, source_field), _json_text(obj, target_field)
        problem = next((v for v in (source, target) if isinstance(v, _Problem)), None)
        if problem is not None:
            _bad(bad_rows, on_bad_row, BadRow(str(file), str(problem), number))
            continue
        pairs.append((source, target))
    return pairs, bad_rows


# --------------------------------------------------------------------------- classification


@dataclass(frozen=True)
class TextExample:
    """A text (or text pair) classification example; `label` is kept as the file's string."""

    text: str
    label: str
    text_pair: str | None = None


@dataclass(frozen=True)
class _Fields:
    """The resolved reading plan for a delimited file."""

    text: str | int
    label: str | int
    text_pair: str | int | None
    labels: tuple[str, ...] | None


def read_delimited(
    path: str | Path,
    *,
    text_field: str | int,
    label_field: str | int,
    text_pair_field: str | int | None = None,
    delimiter: str | None = None,
    has_header: bool | None = None,
    labels: list[str] | None = None,
    on_bad_row: OnBadRow = "error",
) -> tuple[list[TextExample], BadRows]:
    """Read a TSV, CSV or JSONL classification file into `TextExample`s.

    Args:
        path: the file; `.tsv`, `.csv` and `.jsonl` set the format unless `delimiter` is given.
        text_field, label_field, text_pair_field: column names (header or JSON keys), or
            0-based column indices for a delimited file.
        delimiter: the column separator; None infers it from the suffix.
        has_header: None detects a header: the first row is one when it holds every field
            named by string. Without a header, fields must be column indices.
        labels: the valid labels; any other label is a bad row.
        on_bad_row: "error" raises at the first bad row, "skip" records it in `BadRows`.
    """
    _check_on_bad_row(on_bad_row)
    file = _existing_file(path)
    fields = _Fields(
        text_field,
        label_field,
        text_pair_field,
        tuple(str(x) for x in labels) if labels is not None else None,
    )
    if delimiter is None and file.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl_examples(file, fields, on_bad_row)
    if delimiter is None:
        if file.suffix.lower() not in DELIMITER_BY_SUFFIX:
            raise UserError(
                f"cannot tell the format of {str(file)!r} from its suffix {file.suffix!r}: "
                "use .tsv, .csv or .jsonl, or pass delimiter"
            )
        delimiter = DELIMITER_BY_SUFFIX[file.suffix.lower()]
    return _read_delimited_examples(file, fields, delimiter, has_header, on_bad_row)


def _read_jsonl_examples(
    file: Path, fields: _Fields, on_bad_row: str
) -> tuple[list[TextExample], BadRows]:
    names = [f for f in (fields.text, fields.label, fields.text_pair) if f is not None]
    if not all(isinstance(f, str) for f in names):
        raise UserError(
            f"{str(file)!r} is JSON Lines: fields must be key names, not column indices {names}"
        )
    examples: list[TextExample] = []
    bad_rows = BadRows()
    for number, obj in _jsonl_objects(file, bad_rows, on_bad_row):
        values = {f: _json_text(obj, f, allow_number=f == fields.label) for f in names}
        problem = _example_problem(values, fields)
        if problem:
            _bad(bad_rows, on_bad_row, BadRow(str(file), problem, number))
            continue
        examples.append(_example(values, fields))
    return examples, bad_rows


def _example_problem(values: dict[Any, str], fields: _Fields) -> str | None:
    for value in values.values():
        if isinstance(value, _Problem):
            return str(value)
    label = values[fields.label]
    if fields.labels is not None and label not in fields.labels:
        return f"unknown label {label!r}; valid labels: {list(fields.labels)}"
    return None


def _example(values: dict[Any, str], fields: _Fields) -> TextExample:
    pair = values[fields.text_pair] if fields.text_pair is not None else None
    return TextExample(text=values[fields.text], label=values[fields.label], text_pair=pair)


def _csv_rows(file: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line number, cells) per non-blank row. TSV has no quoting: quotes are text."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        start = 1
        try:
            for cells in reader:
                if cells and any(c.strip() for c in cells):
                    yield start, cells
                start = reader.line_num + 1
        except csv.Error as e:
            raise UserError(f"{file}:{start}: cannot parse the row ({e})") from None
        except UnicodeDecodeError as e:
            raise UserError(f"data file {str(file)!r} is not UTF-8 text: {e}") from None


def _read_delimited_examples(
    file: Path, fields: _Fields, delimiter: str, has_header: bool | None, on_bad_row: str
) -> tuple[list[TextExample], BadRows]:
    rows = _csv_rows(file, delimiter)
    first = next(rows, None)
    if first is None:
        raise UserError(f"data file {str(file)!r} has no rows")
    columns, n_columns, header = _resolve_columns(file, first[1], fields, has_header)
    examples: list[TextExample] = []
    bad_rows = BadRows()
    data_rows = rows if header else chain([first], rows)
    for number, cells in data_rows:
        if len(cells) != n_columns:
            reason = (
                f"{len(cells)} columns, expected {n_columns} "
                f"(like {'the header' if header else 'the first row'}); "
                f"delimiter is {delimiter!r}"
            )
            _bad(bad_rows, on_bad_row, BadRow(str(file), reason, number))
            continue
        values = {}
        for name, index in columns.items():
            text = cells[index].strip()
            values[name] = text if text else _Problem(f"column {name!r} is empty")
        problem = _example_problem(values, fields)
        if problem:
            _bad(bad_rows, on_bad_row, BadRow(str(file), problem, number))
            continue
        examples.append(_example(values, fields))
    return examples, bad_rows


def _resolve_columns(
    file: Path, first_row: list[str], fields: _Fields, has_header: bool | None
) -> tuple[dict[str | int, int], int, bool]:
    """Map each field to a column index; returns (columns, column count, first row is header)."""
    wanted = [f for f in (fields.text, fields.label, fields.text_pair) if f is not None]
    names = [f for f in wanted if isinstance(f, str)]
    cells = [c.strip() for c in first_row]
    if has_header is None:
        has_header = bool(names) and all(n in cells for n in names)
        if names and not has_header:
            raise UserError(
                f"{str(file)!r}: fields {names} are not all in the first row {cells}; name "
                "columns from the header, or give 0-based column indices and has_header=false"
            )
    if not has_header and names:
        raise UserError(
            f"{str(file)!r} has no header (has_header=false), so fields {names} cannot be "
            f"found by name: give 0-based column indices 0..{len(cells) - 1}"
        )
    columns: dict[str | int, int] = {}
    for f in wanted:
        if isinstance(f, str):
            if f not in cells:
                raise UserError(f"{str(file)!r}: field {f!r} is not in the header {cells}")
            columns[f] = cells.index(f)
        elif not -len(cells) <= f < len(cells):
            raise UserError(
                f"{str(file)!r}: column index {f} is out of range: the file has {len(cells)} "
                f"columns, valid indices are 0..{len(cells) - 1}"
            )
        else:
            columns[f] = f % len(cells)
    return columns, len(cells), has_header


# --------------------------------------------------------------------------- CoNLL


@dataclass(frozen=True)
class TaggedSentence:
    """A sentence of tokens with one tag each (NER, POS or chunk tags)."""

    tokens: list[str]
    tags: list[str]


def _iob2_problem(tag: str, previous: str) -> str | None:
    """Why `tag` is not valid IOB2 after `previous`, or None (Tjong Kim Sang & Veenstra 1999)."""
    prefix, _, entity = tag.partition("-")
    if tag == "O":
        return None
    if prefix not in ("B", "I") or not entity:
        return f"tag {tag!r} is not IOB2: use O, B-<type> or I-<type>"
    if prefix == "I" and previous not in (f"B-{entity}", f"I-{entity}"):
        return (
            f"tag {tag!r} follows {previous or 'the sentence start'!r}: in IOB2 an entity "
            f"starts with B-{entity} (IOB1 data: pass tag_scheme=None)"
        )
    return None


TAG_SCHEMES = {"iob2": _iob2_problem, "bio": _iob2_problem}


def read_conll(
    path: str | Path,
    *,
    token_column: int = 0,
    tag_column: int = -1,
    tag_scheme: str | None = "iob2",
    on_bad_row: OnBadRow = "error",
) -> tuple[list[TaggedSentence], BadRows]:
    """CoNLL columns (one token per line, blank line between sentences) -> `TaggedSentence`s.

    `-DOCSTART-` lines are skipped. `tag_scheme` "iob2" (alias "bio") checks every tag is O,
    B-X or I-X continuing an X entity; None accepts any tag (POS or chunk columns). A bad
    line drops its whole sentence and is recorded once, with the line number.
    """
    _check_on_bad_row(on_bad_row)
    if tag_scheme is not None and tag_scheme not in TAG_SCHEMES:
        raise UserError(
            f"tag_scheme={tag_scheme!r} is not valid: use one of {sorted(TAG_SCHEMES)} or None"
        )
    file = _existing_file(path)
    sentences: list[TaggedSentence] = []
    bad_rows = BadRows()
    width: tuple[int, int] | None = None  # (columns, line): the first token line sets the width
    for start, rows in _conll_blocks(_lines(file)):
        width = width or (len(rows[0][1]), rows[0][0])
        sentence, problem = _conll_sentence(rows, width, token_column, tag_column, tag_scheme)
        if problem is not None:
            line, reason = problem
            reason += f"; skipping the sentence starting at line {start}"
            _bad(bad_rows, on_bad_row, BadRow(str(file), reason, line))
            continue
        sentences.append(sentence)
    return sentences, bad_rows


def _conll_blocks(lines: list[str]) -> Iterator[tuple[int, list[tuple[int, list[str]]]]]:
    """(first line, [(line number, columns)]) per sentence."""
    block: list[tuple[int, list[str]]] = []
    for number, line in enumerate(lines, start=1):
        columns = line.split()
        if not columns or columns[0] == DOCSTART:
            if block:
                yield block[0][0], block
            block = []
            continue
        block.append((number, columns))
    if block:
        yield block[0][0], block


def _conll_sentence(
    rows: list[tuple[int, list[str]]],
    width: tuple[int, int],
    token_column: int,
    tag_column: int,
    tag_scheme: str | None,
) -> tuple[TaggedSentence, tuple[int, str] | None]:
    n_columns, first_line = width
    tokens: list[str] = []
    tags: list[str] = []
    check = TAG_SCHEMES[tag_scheme] if tag_scheme is not None else None
    for number, columns in rows:
        if len(columns) != n_columns:
            return TaggedSentence([], []), (
                number,
                f"{len(columns)} columns, expected {n_columns} like line {first_line}",
            )
        for name, index in (("token_column", token_column), ("tag_column", tag_column)):
            if not -len(columns) <= index < len(columns):
                return TaggedSentence([], []), (
                    number,
                    f"{name}={index} is out of range for a line of {len(columns)} "
                    f"columns: valid indices are 0..{len(columns) - 1}",
                )
        tag = columns[tag_column]
        problem = check(tag, tags[-1] if tags else "") if check else None
        if problem:
            return TaggedSentence([], []), (number, problem)
        tokens.append(columns[token_column])
        tags.append(tag)
    return TaggedSentence(tokens, tags), None


# --------------------------------------------------------------------------- SQuAD


@dataclass(frozen=True)
class QAExample:
    """A SQuAD question; `answers` are (text, char_start) spans of `context`."""

    id: str
    question: str
    context: str
    answers: list[tuple[str, int]]


def read_squad(
    path: str | Path, *, on_bad_row: OnBadRow = "error"
) -> tuple[list[QAExample], BadRows]:
    """SQuAD v1.1 JSON ({"data": [{"paragraphs": [{"context", "qas"}]}]}) -> `QAExample`s.

    Each answer's text must equal context[answer_start:answer_start + len(text)]; a question
    failing that (or missing a field) is a bad row, reported by its question id.
    """
    _check_on_bad_row(on_bad_row)
    file = _existing_file(path)
    try:
        document = json.loads(_read_text(file))
    except json.JSONDecodeError as e:
        raise UserError(f"{file}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise UserError(
            f"{str(file)!r} is not SQuAD JSON: expected an object with a "
            "'data' list of articles with 'paragraphs'"
        )
    examples: list[QAExample] = []
    bad_rows = BadRows()
    for where, context, qa in _squad_questions(document["data"]):
        key = f"question id {qa['id']}" if isinstance(qa, dict) and "id" in qa else where
        example_or_reason = _squad_example(context, qa)
        if isinstance(example_or_reason, str):
            _bad(bad_rows, on_bad_row, BadRow(str(file), example_or_reason, key=key))
            continue
        examples.append(example_or_reason)
    return examples, bad_rows


def _squad_questions(articles: list[Any]) -> Iterator[tuple[str, Any, Any]]:
    """(JSON path, context, question object) for every question, however malformed."""
    for i, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        for j, paragraph in enumerate(paragraphs if isinstance(paragraphs, list) else []):
            if not isinstance(paragraph, dict):
                continue
            qas = paragraph.get("qas")
            for k, qa in enumerate(qas if isinstance(qas, list) else []):
                yield f"data[{i}].paragraphs[{j}].qas[{k}]", paragraph.get("context"), qa


def _squad_example(context: Any, qa: Any) -> QAExample | str:
    """The example, or the reason the question is bad."""
    if not isinstance(context, str) or not context.strip():
        return "the paragraph has no 'context' text"
    if not isinstance(qa, dict):
        return "question is not a JSON object"
    for name in ("id", "question"):
        if not isinstance(qa.get(name), str) or not qa[name].strip():
            return f"missing or empty {name!r}"
    answers = qa.get("answers")
    if not isinstance(answers, list) or not answers:
        return "no 'answers': SQuAD v1.1 needs at least one (text, answer_start) per question"
    spans: list[tuple[str, int]] = []
    for answer in answers:
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not isinstance(start, int) or isinstance(start, bool):
            return f"answer {answer!r} needs a string 'text' and an integer 'answer_start'"
        found = context[start : start + len(text)] if 0 <= start else ""
        if found != text:
            return (
                f"answer {text!r} does not match the context at answer_start={start}: "
                f"context[{start}:{start + len(text)}] is {found!r}"
            )
        spans.append((text, start))
    return QAExample(id=qa["id"], question=qa["question"].strip(), context=context, answers=spans)
