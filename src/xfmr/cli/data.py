"""`xfmr-data`: the public data sets the shipped experiments read, fetched from their sources,
checked (size and sha256), and laid out under `paths.data_dir` as the experiments expect them
(`xfmr-data get NAME`); `xfmr-data list` says what each is and whether it is here.

Standard library and the table in xfmr.data.sources only: no torch loads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from xfmr.cli.common import fail
from xfmr.data.fetch import FetchFailed, Found, get, survey
from xfmr.data.sources import DATA_SETS, DataSet, by_name, experiment_paths, users
from xfmr.errors import DiskFull, UserError
from xfmr.paths import config_dir

PROG = "xfmr-data"
# paths.data_dir's default (conf/paths/default.yaml): `data` under the directory xfmr-train is
# started from. tests/cli/test_data_get.py holds the two together.
DEFAULT_DATA_DIR = Path("data")
EXAMPLES = """examples:
  xfmr-data list                      each data set: what it is, its source, who reads it, here?
  xfmr-data get multi30k              into ./data, which xfmr-train started here reads
  xfmr-train experiment=transformer_multi30k
  xfmr-data get sst2 conll2003 --data-dir /disk/data
  xfmr-train experiment=bert_sst2 paths.data_dir=/disk/data

A file already there and right is skipped; one there that is not what the source gives is
refused (exit 2) unless --force. A source that cannot be reached, or that gives a file other
than the one pinned, fails with exit 1 and writes nothing for it; without a network, the
message says where to fetch each file by hand and the exact path to put it.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        fail(PROG, f"{message} (see {PROG} --help)")


def build_parser(names: Sequence[str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Fetch the public data sets the shipped experiments read, checked, into "
        "the folder they read as paths.data_dir.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help="the folder the experiments read as paths.data_dir (default: ./data, which is "
        "paths.data_dir for xfmr-train started in this directory; for another DIR, give "
        "xfmr-train paths.data_dir=DIR)",
    )
    fetch = commands.add_parser(
        "get",
        parents=[where],
        help="fetch data sets",
        description="Fetch data sets into --data-dir, each file checked; files already there "
        "and right are skipped.",
    )
    fetch.add_argument("names", nargs="+", metavar="NAME", help=f"one of: {', '.join(names)}")
    fetch.add_argument(
        "--force",
        action="store_true",
        help="fetch again and replace files that are present but not known to be right",
    )
    fetch.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to wait for a source to answer (default: 30)",
    )
    commands.add_parser(
        "list", parents=[where], help="list the data sets", description="List the data sets."
    )
    return parser


def main(argv: list[str] | None = None, *, data_sets: Sequence[DataSet] = DATA_SETS) -> None:
    """The command line; `data_sets` is the table it fetches from (tests give their own)."""
    args = build_parser([d.name for d in data_sets]).parse_args(argv)
    data_dir = Path(os.path.abspath(args.data_dir.expanduser()))
    readers = users(data_sets, experiment_paths(config_dir() / "experiment"))
    try:
        if args.command == "list":
            show(data_sets, data_dir, readers)
            return
        chosen = choose(args.names, data_sets, readers)
        get(chosen, data_dir, force=args.force, timeout=args.timeout, report=_say)
    except UserError as e:
        fail(PROG, str(e))
    except (FetchFailed, DiskFull) as e:
        fail(PROG, str(e), code=1)
    except BrokenPipeError:  # `xfmr-data list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own recipe
        sys.exit(141)
    except OSError as e:  # a --data-dir it may not write, a file where a folder must go
        fail(PROG, f"{e.filename}: {e.strerror}" if e.filename else str(e), code=1)
    except KeyboardInterrupt:
        fail(PROG, "interrupted: every file written is whole; run it again to finish", code=130)
    commands = [
        f"  xfmr-train experiment={experiment} paths.data_dir={data_dir}"
        for data_set in chosen
        for experiment in readers[data_set.name]
    ]
    _say(f"done: in {data_dir}." + (" Use it with:" if commands else ""))
    for command in commands:
        _say(command)


def choose(
    names: Sequence[str], data_sets: Sequence[DataSet], readers: Mapping[str, list[str]]
) -> list[DataSet]:
    """The data sets `names` name, in order; a name that is none of them is a UserError saying
    which are (and, for an experiment's name, which data sets it reads)."""
    table = by_name(data_sets)
    for name in names:
        if name not in table:
            read = [d for d, experiments in readers.items() if name in experiments]
            hint = f"; experiment {name} reads {' '.join(read)}: {PROG} get {' '.join(read)}"
            raise UserError(
                f"there is no data set {name!r}: choose from {', '.join(table)}"
                + (hint if read else "")
            )
    return [table[name] for name in dict.fromkeys(names)]


def show(data_sets: Sequence[DataSet], data_dir: Path, readers: Mapping[str, list[str]]) -> None:
    _say(f"data sets for paths.data_dir={data_dir} (`{PROG} get NAME` fetches one):")
    for data_set in data_sets:
        _say("")
        _say(f"{data_set.name}: {state_summary(survey(data_set, data_dir))}")
        _say(f"  {data_set.title}")
        _say(f"  source: {source_text(data_set)}")
        _say(f"  about: {data_set.homepage}")
        _say(f"  licence: {data_set.licence}")
        used = ", ".join(f"experiment={e}" for e in readers[data_set.name])
        _say(f"  read by: {used or 'no shipped experiment'}")


def state_summary(found: Sequence[Found]) -> str:
    """Whether a data set is here, in a few words."""
    states = [f.state for f in found]
    wrong = [f for f in found if f.state == "wrong"]
    if wrong:
        return f"{len(wrong)} of {len(found)} files present but not right, e.g. {wrong[0].path}"
    missing = states.count("missing")
    if missing == len(states):
        return "missing"
    if missing:
        return f"partly present: {missing} of {len(states)} files missing"
    unchecked = states.count("unchecked")
    if unchecked:
        return f"present ({unchecked} of {len(states)} files with no pinned sha256 to check)"
    return "present, sha256 checked"


def source_text(data_set: DataSet) -> str:
    """Where a data set is fetched from and how much: one URL, or their common folder."""
    downloads = data_set.downloads
    size = data_set.download_size
    amount = f"{size / 1e6:.1f} MB" if size is not None else "size unknown"
    if len(downloads) == 1:
        return f"{downloads[0].url} ({amount})"
    folder = os.path.commonprefix([d.url for d in downloads]).rsplit("/", 1)[0]
    return f"{folder}/ ({len(downloads)} files, {amount})"


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    main()
