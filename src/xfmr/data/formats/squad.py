"""SQuAD v1.1 questions, each answer checked against the context it points into."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xfmr.data.formats.bad_rows import BadRow, BadRows, OnBadRow, check_on_bad_row, reject
from xfmr.data.formats.reading import existing_file, read_text
from xfmr.errors import UserError


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
    check_on_bad_row(on_bad_row)
    file = existing_file(path)
    try:
        document = json.loads(read_text(file))
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
            reject(bad_rows, on_bad_row, BadRow(str(file), example_or_reason, key=key))
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
