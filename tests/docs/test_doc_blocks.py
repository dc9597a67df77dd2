"""Every code block of the docs (README.md, docs/**/*.md) is fenced and marked: `illustrative`
(shown, not run), `run=ID` (a test reads it with `block("ID")` and runs it) or `checked` (xfmr
command lines, each judged here as the command judges it before torch loads). So a renamed
choice, key or flag fails a test until the docs follow. The rules: tests/helpers/docs.py; the
checker: tests/helpers/doc_commands.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import helpers.docs as docs
from helpers import ROOT, TESTS_DIR
from helpers.doc_commands import check_block, command_lines, write_corpora
from helpers.docs import CHECKED, DocBlock, blocks_of, doc_blocks, doc_files, marker_problem

DOCS = doc_files()


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpora(tmp_path_factory.mktemp("corpora"))


# --------------------------------------------------------------------------- the docs


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_block_is_fenced_with_one_marker(path: Path) -> None:
    problems = [f"{b.where}: {p}" for b in doc_blocks([path]) if (p := marker_problem(b))]
    assert not problems, "\n".join(problems)


def test_run_ids_are_unique_and_each_is_read_by_a_test() -> None:
    marked: dict[str, list[str]] = {}
    for b in doc_blocks():
        if b.run_id is not None:
            marked.setdefault(b.run_id, []).append(b.where)
    twice = [f"run={id} marks {', '.join(where)}" for id, where in marked.items() if len(where) > 1]
    assert not twice, "\n".join(twice)
    read = reads_of_blocks()
    unread = [f"{where[0]}: run={id}, which no test reads with block({id!r})"
              for id, where in marked.items() if id not in read]  # fmt: skip
    unmarked = [f"{where}: block({id!r}) reads no block: none is marked run={id}"
                for id, where in read.items() if id not in marked]  # fmt: skip
    assert not unread + unmarked, "\n".join(unread + unmarked)


def reads_of_blocks() -> dict[str, str]:
    """ID -> where a test calls `block("ID")` (or `docs.block("ID")`), its one argument a
    string literal, in tests/**/*.py."""
    found = {}
    for path in sorted(TESTS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "block"
                and len(node.args) == 1
                and not node.keywords
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(node.args[0].value, f"{_name(path)}:{node.lineno}")
    return found


CHECKED_BLOCKS = [b for b in doc_blocks() if b.marker == CHECKED]


@pytest.mark.slow  # composes each command: a third of a second each, README's in about 30 s
@pytest.mark.parametrize("checked", CHECKED_BLOCKS, ids=lambda b: b.where)
def test_checked_commands_are_what_xfmr_accepts(
    checked: DocBlock, corpora: Path, tmp_path: Path
) -> None:
    problems = check_block(checked, corpora, tmp_path / "project")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the rules and the checker


PAGE = """\
# A page

```python run=first-one
print("run by a test")
```

    an indented block

```console
xfmr-train
```

```console illustrative checked
xfmr-train
```

```yaml run=no/slashes
a: 1
```

```pythn illustrative
print()
```

```python checked
print()
```

```{code-block} python
print()
```

:::{note}
inside a note
:::

```{note}
A note whose body is Markdown:

~~~text
unmarked inside the note
~~~
```

```{toctree}
benchmarks
```

```text illustrative
shown only
```
"""


def test_the_rules_name_each_block_that_breaks_them() -> None:
    blocks = blocks_of(PAGE, Path("page.md"))
    problems = {b.line: marker_problem(b) for b in blocks}
    assert problems.pop(3) is None and problems.pop(49) is None
    expected = {
        7: "an indented code block cannot carry a marker",
        9: "no marker after ```console",
        13: "2 words ('illustrative checked') after ```console",
        17: "run=no/slashes: an ID is letters, digits",
        21: "language 'pythn' is not a Pygments lexer",
        25: "```python checked: a checked block holds command lines",
        29: "a {code-block} directive cannot carry a marker",
        40: "no marker after ```text",  # inside the note
    }
    assert sorted(problems) == sorted(expected)
    for line, start in expected.items():
        assert problems[line].startswith(start), (line, problems[line])


def test_block_reads_the_one_block_of_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    page = PAGE + "\n```python run=twice\n1\n```\n\n```python run=twice\n2\n```\n"
    monkeypatch.setattr(docs, "_doc_blocks", lambda: tuple(blocks_of(page, Path("page.md"))))
    # The IDs by name: a string literal in a call of `block` is a read of the docs' own block.
    first, twice, absent = "first-one", "twice", "absent"
    assert docs.block(first) == 'print("run by a test")\n'
    with pytest.raises(LookupError, match="run=twice marks page.md:53, page.md:57"):
        docs.block(twice)
    with pytest.raises(LookupError, match="run=absent marks no block"):
        docs.block(absent)


def test_command_lines_join_continuations_and_drop_comments() -> None:
    text = (
        "# a comment line\n"
        "\n"
        "xfmr-train pos=rotary \\\n"
        "    optim.lr=1e-3   # trailing comment\n"
        "xfmr-generate run_dir=RUN input='a # b'  # comment\n"
        "xfmr-train note=a#b\n"
    )
    assert command_lines(text) == [
        (2, "xfmr-train pos=rotary optim.lr=1e-3"),
        (4, "xfmr-generate run_dir=RUN input='a # b'"),
        (5, "xfmr-train note=a#b"),
    ]


COMMANDS = """\
# Commands

```console checked
xfmr-train pos=rotary trainer.max_steps=10 hydra.run.dir=outputs/a
xfmr-generate run_dir=outputs/a input='the cat'
xfmr-train model.d_modle=64                         # an unknown key
xfmr-train pos=rotaryy                              # a choice no group has
xfmr-train -m pos=learned,rotary hydra.sweeper.workers=2 hydra.sweep.dir=outputs/s
xfmr-train -m pos=learned,rotary hydra.sweeper.n_trails=3
PYTHONPATH=. xfmr-eval run_dir=RUN data.block_size=256
. .venv/bin/activate
xfmr-train -m 'optim.lr=interval(1e-4,1e-2)'        # a range with nothing to sample it
xfmr-train -m seed=1,2 hydra.sweeper.workers=0
```
"""


def test_the_checker_passes_good_commands_and_names_the_bad(corpora: Path, tmp_path: Path) -> None:
    [checked] = blocks_of(COMMANDS, Path("page.md"))
    problems = check_block(checked, corpora, tmp_path / "project")
    expected = [
        ("page.md:6: `xfmr-train model.d_modle=64`:", "model.d_modle is not a model key"),
        ("page.md:7: `xfmr-train pos=rotaryy`:", "pos='rotaryy' is not a choice of the `pos` group"),
        ("page.md:9: `xfmr-train -m pos=learned,rotary hydra.sweeper.n_trails=3`:",
         "Could not override 'hydra.sweeper.n_trails'"),
        ("page.md:11: `. .venv/bin/activate`:", "mark the block illustrative or run it in a test"),
        ("page.md:12: `xfmr-train -m 'optim.lr=interval(1e-4,1e-2)'`:",
         "optim.lr: interval(...) needs a search, not a grid"),
        ("page.md:13: `xfmr-train -m seed=1,2 hydra.sweeper.workers=0`:",
         "hydra.sweeper.workers=0; give a whole number >= 1"),
    ]  # fmt: skip
    assert len(problems) == len(expected), "\n".join(problems)
    for problem, (start, why) in zip(problems, expected, strict=True):
        assert problem.startswith(start) and why in problem, problem
