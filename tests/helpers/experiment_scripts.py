"""Running a benchmarks/experiment_*.py script in quick mode, as its test does: on a corpus the
test writes, with runs, page and caches under the test's own directory."""

from __future__ import annotations

import importlib
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from helpers import ROOT
from helpers.docs import blocks_of, marker_problem


def write_corpus(path: Path) -> Path:
    """About 20,000 characters of made-up words: letters within a word say much about the next,
    so a few steps learn something, and the letters' frequencies alone say little."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(2, 7))) for _ in range(150)]
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(500)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_quick(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`python benchmarks/SCRIPT --quick` over the test's corpus; the page in tmp_path/page,
    every code block of which must be fenced and marked as the docs' are
    (tests/docs/test_doc_blocks.py)."""
    corpus = tmp_path / "words.txt"
    if not corpus.exists():
        write_corpus(corpus)
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--quick", f"--data={corpus}",
               f"--runs={tmp_path / 'runs'}", f"--page={tmp_path / 'page'}"]  # fmt: skip
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    for page in sorted((tmp_path / "page").glob("*.md")) if result.returncode == 0 else []:
        blocks = blocks_of(page.read_text(), page)
        problems = [f"{b.where}: {p}" for b in blocks if (p := marker_problem(b))]
        assert not problems, "\n".join(problems)
    return result


def tables(page: str, first_header: str) -> list[list[list[str]]]:
    """The rows of each of the page's markdown tables whose first column is `first_header`."""
    found = re.findall(rf"^\| {re.escape(first_header)} \|.*\n\|(?:---\|)+\n((?:\|.*\n)+)",
                       page, re.MULTILINE)  # fmt: skip
    assert found, f"no table headed {first_header!r} in:\n{page}"
    return [[[cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in rows.splitlines()] for rows in found]  # fmt: skip


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def benchmark_script(name: str):
    """A script of benchmarks/ (`experiment_positions`) imported as a module, for a test that
    calls its functions; benchmarks/ is on sys.path only while it imports."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
