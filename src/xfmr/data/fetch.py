"""Getting the data sets of xfmr.data.sources onto disk, each file checked and written whole.

Every download goes to a scratch file outside `paths.data_dir` and is checked (size and sha256)
before anything is laid out; each laid-out file is written through `xfmr.files.atomic_path`
and checked against its own pin before it takes its name. So a download that is cut off, or
that is not the file the table pins, leaves nothing under `paths.data_dir`, and a file there is
whole. Standard library only (urllib, gzip, zipfile): no torch, no new dependency.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from xfmr.data.sources import DataFile, DataSet, Download
from xfmr.errors import UserError
from xfmr.files import atomic_path

State = Literal["ok", "unchecked", "missing", "wrong"]
CHUNK = 1 << 20
USER_AGENT = "xfmr-data (Python urllib)"
# An archive that is not what its name says (only possible where no sha256 pins it).
_BAD_ARCHIVE = (gzip.BadGzipFile, zipfile.BadZipFile, EOFError, zlib.error)


class FetchFailed(Exception):
    """A download that could not be made, or was not the file the table pins: nothing was
    written for it. The message says what to do."""


@dataclass(frozen=True)
class Found:
    """One file of a data set as it is on disk at `path`: "ok" (it matches its pin),
    "unchecked" (present, and nothing pins it), "missing", or "wrong" (present, and not its pin;
    `size` and `sha256` say what it is)."""

    file: DataFile
    path: Path
    state: State
    size: int | None = None
    sha256: str | None = None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def survey(data_set: DataSet, data_dir: Path) -> list[Found]:
    """What of `data_set` is under `data_dir`, each file checked against its pin."""
    found = []
    for file in data_set.files:
        path = data_dir / file.path
        size, sha256 = file.expected
        if not path.is_file():
            found.append(Found(file, path, "missing"))
            continue
        actual = path.stat().st_size
        if sha256 is None:
            found.append(Found(file, path, "unchecked", actual))
        elif size is not None and actual != size:  # no need to read it
            found.append(Found(file, path, "wrong", actual))
        else:
            digest = sha256_of(path)
            found.append(Found(file, path, "ok" if digest == sha256 else "wrong", actual, digest))
    return found


def get(
    data_sets: Sequence[DataSet],
    data_dir: Path,
    *,
    force: bool = False,
    timeout: float = 30.0,
    report: Callable[[str], None] = print,
) -> None:
    """Fetch what is missing of `data_sets` into `data_dir`, skipping files already there and
    right. A file there that is not its pin is refused (UserError) before anything is fetched,
    unless `force`, which fetches it again, as it does files nothing pins. A source that cannot be
    reached raises FetchFailed saying where each remaining file can be fetched by hand and the
    exact path it goes to."""
    found = [f for data_set in data_sets for f in survey(data_set, data_dir)]
    wrong = [f for f in found if f.state == "wrong"]
    if wrong and not force:
        raise UserError(wrong_message(wrong))
    refetch = ("missing", "wrong", "unchecked") if force else ("missing",)
    todo = [f for f in found if f.state in refetch]
    for f in found:
        if f not in todo:
            report(present_line(f))
    downloads = list(dict.fromkeys(f.file.source for f in todo))
    for index, download in enumerate(downloads):
        try:
            _fetch(download, [f for f in todo if f.file.source == download], timeout, report)
        except _Unreachable as e:
            remaining = [f for f in todo if f.file.source in downloads[index:]]
            names = [d.name for d in data_sets]
            raise FetchFailed(
                by_hand_message(download.url, e.cause, remaining, names, data_dir)
            ) from None


def present_line(found: Found) -> str:
    if found.state == "ok":
        return f"{found.path}: present, {found.size:,} bytes, sha256 checked"
    return (
        f"{found.path}: present, {found.size:,} bytes (no pinned sha256 to check it against; "
        "--force fetches it again)"
    )


def wrong_message(wrong: Sequence[Found]) -> str:
    """One line: the first file present but not its pin, what it is, what it should be."""
    first = wrong[0]
    more = ""
    if len(wrong) > 1:
        more = f" (and {len(wrong) - 1} more: {', '.join(str(f.path) for f in wrong[1:])})"
    return (
        f"{first.path} is present but is not the file xfmr-data gets: "
        f"{pin_text(first.size, first.sha256)}, not {pin_text(*first.file.expected)}{more}; "
        "move it away, or run again with --force to replace it"
    )


def pin_text(size: int | None, sha256: str | None) -> str:
    parts = ([f"{size:,} bytes"] if size is not None else []) + (
        [f"sha256 {sha256}"] if sha256 is not None else []
    )
    return " with ".join(parts) or "anything"


def by_hand_message(
    url: str, cause: str, remaining: Sequence[Found], names: Sequence[str], data_dir: Path
) -> str:
    """Where to fetch each remaining file by hand, and the exact path it goes to."""
    lines = [
        f"cannot download {url} ({cause}). Fetch these by hand, put each where shown, then run "
        f"`xfmr-data get {' '.join(names)} --data-dir {data_dir}` to check them:"
    ]
    for found in remaining:
        source = found.file.source
        how = {"none": "save as", "gunzip": "gunzip to", "unzip": f"unzip {found.file.member} to"}
        lines.append(f"  {source.url} -> {how[source.unpack]} {found.path}")
    return "\n".join(lines)


class _Unreachable(Exception):
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def _fetch(
    download: Download, files: Sequence[Found], timeout: float, report: Callable[[str], None]
) -> None:
    """One download into a scratch file, checked, then each of `files` laid out from it."""
    size = f", {download.size / 1e6:.1f} MB" if download.size is not None else ""
    report(f"fetching {download.url}{size}")
    with _scratch() as scratch:
        got_size, got_sha256 = _download(download, scratch, timeout)
        if not _matches(got_size, got_sha256, download.size, download.sha256):
            raise FetchFailed(
                f"{download.url} gave {pin_text(got_size, got_sha256)}, not the "
                f"{pin_text(download.size, download.sha256)} xfmr-data expects: nothing was "
                "written. The source may have changed; fetch it by hand and compare"
            )
        for found in files:
            size_written = _lay_out(download, scratch, found)
            pinned = found.file.expected[1] is not None
            check = "sha256 checked" if pinned else "its download's sha256 checked"
            report(f"{found.path}: written, {size_written:,} bytes, {check}")


@contextmanager
def _scratch() -> Iterator[Path]:
    handle, name = tempfile.mkstemp(prefix="xfmr-data-", suffix=".part")
    os.close(handle)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def _download(download: Download, into: Path, timeout: float) -> tuple[int, str]:
    """`download.url` into the file `into`: (size, sha256) of what came. Stops early when more
    comes than the pinned size, so a wrong answer cannot fill the disk."""
    digest, size = hashlib.sha256(), 0
    request = urllib.request.Request(download.url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(into, "wb") as out:
            while chunk := response.read(CHUNK):
                size += len(chunk)
                if download.size is not None and size > download.size:
                    raise FetchFailed(
                        f"{download.url} sent more than the {download.size:,} bytes xfmr-data "
                        "expects: nothing was written. The source may have changed; fetch it by "
                        "hand and compare"
                    )
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as e:
        raise _Unreachable(f"HTTP {e.code} {e.reason}") from None
    except TimeoutError:
        raise _Unreachable(f"no answer within {timeout:g} s") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, TimeoutError):
            raise _Unreachable(f"no answer within {timeout:g} s") from None
        raise _Unreachable(str(reason)) from None
    except (ConnectionError, http.client.HTTPException) as e:
        raise _Unreachable(f"{type(e).__name__}: {e}") from None
    return size, digest.hexdigest()


def _matches(size: int, sha256: str, pinned_size: int | None, pinned_sha256: str | None) -> bool:
    return pinned_size in (None, size) and pinned_sha256 in (None, sha256)


def _lay_out(download: Download, scratch: Path, found: Found) -> int:
    """One file from the checked download, written whole at `found.path` if it matches its own
    pin (where it has one): the size written."""
    with atomic_path(found.path) as temporary:
        digest, written = hashlib.sha256(), 0
        try:
            with _opened(download, scratch, found.file) as source, open(temporary, "wb") as out:
                while chunk := source.read(CHUNK):
                    written += len(chunk)
                    digest.update(chunk)
                    out.write(chunk)
        except _BAD_ARCHIVE as e:
            kind = {"gunzip": "gzip", "unzip": "zip"}.get(download.unpack, "")
            raise FetchFailed(
                f"{download.url} is not a readable {kind} file ({e}): "
                f"{found.file.path} was not written"
            ) from None
        if not _matches(written, digest.hexdigest(), *found.file.expected):
            raise FetchFailed(
                f"{found.file.path} from {download.url} is {pin_text(written, digest.hexdigest())}"
                f", not {pin_text(*found.file.expected)}: it was not written"
            )
    return written


@contextmanager
def _opened(download: Download, scratch: Path, file: DataFile) -> Iterator[BinaryIO]:
    """The bytes of `file` inside the downloaded `scratch`."""
    if download.unpack == "none":
        with open(scratch, "rb") as f:
            yield f
    elif download.unpack == "gunzip":
        with gzip.open(scratch, "rb") as f:
            yield f  # type: ignore[misc]
    else:
        with zipfile.ZipFile(scratch) as archive:
            try:
                member = archive.open(str(file.member))
            except KeyError:
                held = ", ".join(archive.namelist()[:12])
                raise FetchFailed(
                    f"{download.url} holds no {file.member} (it holds {held}): nothing was "
                    "written for it. The source may have changed; fetch it by hand"
                ) from None
            with member:
                yield member  # type: ignore[misc]
