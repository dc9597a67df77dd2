"""Tagged sentences from CoNLL column files (one token per line, a blank line between
sentences), each tag checked against a tag scheme (IOB2) when one is given."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xfmr.data.formats.bad_rows import BadRow, BadRows, OnBadRow, check_on_bad_row, reject
from xfmr.data.formats.reading import existing_file, read_lines
from xfmr.errors import UserError

DOCSTART = "-DOCSTART-"


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
    check_on_bad_row(on_bad_row)
    if tag_scheme is not None and tag_scheme not in TAG_SCHEMES:
        raise UserError(
            f"tag_scheme={tag_scheme!r} is not valid: use one of {sorted(TAG_SCHEMES)} or None"
        )
    file = existing_file(path)
    sentences: list[TaggedSentence] = []
    bad_rows = BadRows()
    width: tuple[int, int] | None = None  # (columns, line): the first token line sets the width
    for start, rows in conll_blocks(read_lines(file)):
        width = width or (len(rows[0][1]), rows[0][0])
        sentence, problem = _conll_sentence(rows, width, token_column, tag_column, tag_scheme)
        if problem is not None:
            line, reason = problem
            reason += f"; skipping the sentence starting at line {start}"
            reject(bad_rows, on_bad_row, BadRow(str(file), reason, line))
            continue
        sentences.append(sentence)
    return sentences, bad_rows


def conll_blocks(lines: list[str]) -> Iterator[tuple[int, list[tuple[int, list[str]]]]]:
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
