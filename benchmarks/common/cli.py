"""The command line the scripts share: a parser described by the script's own docstring, the
arguments that name tiny Shakespeare's text and nanoGPT's directory (each checked as it is
parsed, so a wrong path stops the script before anything runs), and the command as it was
typed, for the head of what a script prints.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

SHAKESPEARE = "tiny Shakespeare's input.txt"
NANOGPT_FILES = ("model.py", "train.py")  # what the scripts import from nanoGPT or run


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser, described by the first paragraph of `doc` (its docstring) as written."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_shakespeare(parser: argparse.ArgumentParser) -> None:
    """--data, tiny Shakespeare's input.txt: a file, or the parser exits saying so."""
    parser.add_argument("--data", type=_text_file, required=True, help=SHAKESPEARE)


def add_nanogpt(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--nanogpt, nanoGPT's directory: it holds NANOGPT_FILES, or the parser exits saying so.
    Nothing writes to it: a script runs train.py in a copy (`common.nanogpt`)."""
    parser.add_argument(
        "--nanogpt", type=_nanogpt_dir, required=required, help="nanoGPT's directory"
    )


def _text_file(value: str) -> Path:
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file ({SHAKESPEARE})")
    return path


def _nanogpt_dir(value: str) -> Path:
    path = Path(value)
    missing = [name for name in NANOGPT_FILES if not (path / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{value}: no {' or '.join(missing)} there (nanoGPT's)")
    return path


def command_line() -> str:
    """This script's command as it was typed, quoted for a shell."""
    return shlex.join(["python", *sys.argv])
