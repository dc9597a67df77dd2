"""The documentation site (docs/, `make docs`): Sphinx builds it with warnings as errors, so a
broken link, a missing image or an unknown xfmr name fails the build; the API reference holds
every model key with what it is for; headless chromium opens the built pages from a local
server and every image on them loads; the search finds a page; and `make docs-serve` serves
the site on 127.0.0.1 and rebuilds it when a page changes.

The make targets run as a person runs them, with this interpreter's environment (BIN) and
without `install` (`-o install`), on a copy of docs/ so nothing is written into the checkout."""

from __future__ import annotations

import html
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import fields
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

import pytest

from helpers import ROOT
from helpers.browser import browse, chromium
from helpers.cli import started
from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.key import key_of

DOCS = ROOT / "docs"
PNG = b"\x89PNG\r\n\x1a\n"
IMAGE = DOCS / "experiments" / "positions" / "curves.png"


def make(target: str, docs: Path, *variables: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of `make TARGET DOCS=docs` in the checkout: with this
    interpreter's tools (BIN), without `install`, documenting the checkout's src/."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    command = ["make", "--no-print-directory", "-o", "install", target]
    command += [f"BIN={Path(sys.executable).parent}", f"DOCS={docs}", *variables]
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH")]
    return command, {**env, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "NO_COLOR": "1"}


def make_docs(docs: Path) -> subprocess.CompletedProcess:
    command, env = make("docs", docs)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built once by `make docs` from a copy of docs/, beside the checkout's
    other folders (linked), which pages link to (examples/quickstart.ipynb)."""
    root = tmp_path_factory.mktemp("site")
    docs = root / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("_build"))
    for entry in ROOT.iterdir():
        if entry.name not in ("docs", ".git", ".venv") and not entry.name.startswith("."):
            (root / entry.name).symlink_to(entry)
    built = make_docs(docs)
    assert built.returncode == 0, (built.stdout + built.stderr)[-5000:]
    return docs / "_build" / "html"


def tiny_docs(root: Path, page: str) -> Path:
    """docs/conf.py with a home page and one page, `page`, which has an image beside it."""
    docs = root / "docs"
    docs.mkdir()
    shutil.copy(DOCS / "conf.py", docs)
    (docs / "index.md").write_text("# Tiny site\n\n```{toctree}\npage\n```\n")
    (docs / "page.md").write_text(f"# A page\n\n{page}\n")
    shutil.copy(IMAGE, docs / "curves.png")
    return docs


CLEAN_PAGE = (
    "A [link](index.md), a [heading](page.md#a-page), an image: ![curves](curves.png), "
    "and types from other packages: {py:class}`torch.Tensor`, {py:class}`pandas.DataFrame`."
)


def test_a_page_whose_links_images_and_names_resolve_builds(tmp_path: Path) -> None:
    built = make_docs(tiny_docs(tmp_path, CLEAN_PAGE))
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]


@pytest.mark.parametrize(
    ("defect", "said"),
    [
        ("[a page](nowhere.md)", "nowhere.md"),
        ("[a heading](index.md#no-such-heading)", "no-such-heading"),
        ("![an image](missing.png)", "missing.png"),
        ("{py:func}`xfmr.no_such_function`", "xfmr.no_such_function"),
    ],
    ids=["broken link", "broken anchor", "missing image", "unknown xfmr name"],
)
def test_a_page_with_a_dangling_reference_fails_the_build(
    tmp_path: Path, defect: str, said: str
) -> None:
    built = make_docs(tiny_docs(tmp_path, f"{CLEAN_PAGE}\n\n{defect}"))
    warnings = built.stderr
    assert built.returncode != 0, (built.stdout + warnings)[-3000:]
    assert re.search(rf"page\.md:\d+: WARNING: .*{re.escape(said)}", warnings), warnings[-3000:]


def test_a_second_build_fails_as_the_first(tmp_path: Path) -> None:
    """Sphinx warns of a page's faults only when it reads the page: `make docs` reads every
    page each time, so a build after a failed one fails too."""
    docs = tiny_docs(tmp_path, f"{CLEAN_PAGE}\n\n[a page](nowhere.md)")
    first, second = make_docs(docs), make_docs(docs)
    assert first.returncode != 0, first.stderr[-3000:]
    assert second.returncode != 0 and "nowhere.md" in second.stderr, second.stdout[-3000:]


def text_of(page: str) -> str:
    """A page's text: tags dropped, entities and typographic quotes undone, spaces collapsed."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    text = text.translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))
    return " ".join(text.split())


def test_the_api_reference_documents_each_model_key_with_its_doc(site: Path) -> None:
    page = (site / "api.html").read_text()
    for name in ("compose", "train", "open_run", "compare", "Run", "Experiment"):
        assert f'id="xfmr.{name}"' in page, name
    for name in ("Run.history", "Run.generate", "errors.UserError", "errors.RunFailed"):
        assert f'id="xfmr.{name}"' in page, name
    text = text_of(page)
    for cls in (ModelConfig, PosConfig):
        for f in fields(cls):
            assert f'id="xfmr.nn.config.{cls.__name__}.{f.name}"' in page, f.name
            assert text_of(key_of(f).doc.replace("`", "")) in text, f.name  # `x`: code


class Recorder(SimpleHTTPRequestHandler):
    """Serves the built site and records, per path asked for, the status and the first bytes
    sent."""

    answered: dict[str, int]
    sent: dict[str, bytes]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.answered[urlsplit(self.path).path] = int(code)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:
        data = source.read()
        self.sent[urlsplit(self.path).path] = data[:8]
        outputfile.write(data)


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[tuple[str, type[Recorder]]]:
    """The built site on an ephemeral 127.0.0.1 port: its address and the recorder."""
    handler = type("SiteRecorder", (Recorder,), {"answered": {}, "sent": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def dump_dom(url: str, tmp_path: Path) -> str:
    browser = chromium()
    dumped = browse(["--window-size=1400,6000", "--dump-dom", url], tmp_path)
    assert dumped.returncode == 0, f"{browser}: {dumped.stderr[-2000:]}"
    return dumped.stdout


def images_loaded(dom: str, page_url: str, recorder: type[Recorder]) -> list[str]:
    """Every <img src> of the page: asked for by the browser, answered 200 with PNG bytes."""
    sources = re.findall(r"<img\b[^>]*?\bsrc=\"([^\"]+)\"", dom)
    paths = [urlsplit(urljoin(page_url, html.unescape(src))).path for src in sources]
    for path in paths:
        assert recorder.answered.get(path) == 200, (path, recorder.answered)
        assert recorder.sent.get(path, b"").startswith(PNG), path
    return paths


def test_the_home_page_renders_and_lists_every_page(
    served: tuple[str, type[Recorder]], tmp_path: Path
) -> None:
    address, recorder = served
    url = f"{address}/index.html"
    dom = dump_dom(url, tmp_path)
    assert re.search(r"<title>[^<]*xfmr[^<]*</title>", dom), dom[:2000]
    pages = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    pages.remove(Path("index.md"))  # this one
    links = {urlsplit(urljoin(url, href)).path for href in re.findall(r'href="([^"#]+)', dom)}
    for page in pages:
        assert f"/{page.with_suffix('.html').as_posix()}" in links, page
    images_loaded(dom, url, recorder)
    assert recorder.answered.get("/index.html") == 200


def test_an_experiment_page_shows_its_images(
    served: tuple[str, type[Recorder]], tmp_path: Path
) -> None:
    address, recorder = served
    url = f"{address}/experiments/positions.html"
    dom = dump_dom(url, tmp_path)
    shown = images_loaded(dom, url, recorder)
    assert len(shown) >= len(list((DOCS / "experiments" / "positions").glob("*.png"))) >= 1


def test_the_search_finds_a_page_by_a_word_on_it(
    served: tuple[str, type[Recorder]], site: Path, tmp_path: Path
) -> None:
    address, _ = served
    assert (site / "search.html").is_file()
    word = "alibi"  # a word of docs/experiments/positions.md, which the index keeps as it is
    assert word in (DOCS / "experiments" / "positions.md").read_text().lower()
    assert f'"{word}"' in (site / "searchindex.js").read_text()
    dom = dump_dom(f"{address}/search.html?q={word}", tmp_path)
    results = dom[dom.index('id="search-results"') :]
    assert "experiments/positions.html" in results, results[:3000]


def read_lines(process: subprocess.Popen, lines: queue.Queue) -> None:
    for line in process.stdout:
        lines.put(line)


def served_address(lines: queue.Queue, process: subprocess.Popen, seconds: float) -> str:
    """The address `make docs-serve` says it serves on, waiting at most `seconds`."""
    deadline, said = time.monotonic() + seconds, []
    while time.monotonic() < deadline and process.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        said.append(line)
        if found := re.search(r"Serving on (http://127\.0\.0\.1:\d+)", line):
            return found.group(1)
    pytest.fail(f"make docs-serve did not serve within {seconds} s:\n{''.join(said)[-3000:]}")


def page_at(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200
        return answer.read().decode()


def first_page(url: str, seconds: float) -> str:
    """The page at `url` once the server, which says its address before it listens, answers."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return page_at(url)
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_docs_serve_serves_the_site_on_localhost_and_rebuilds_it(tmp_path: Path) -> None:
    docs = tiny_docs(tmp_path, "Served first.")
    command, env = make("docs-serve", docs, "PORT=0")
    lines: queue.Queue = queue.Queue()
    with started(command, ROOT, env, grace=30) as process:  # stopped at the end, group and all
        reader = threading.Thread(target=read_lines, args=(process, lines))
        reader.start()
        address = served_address(lines, process, seconds=120)
        home = first_page(f"{address}/index.html", seconds=30)
        assert "<h1>Tiny site<" in home, home[:3000]
        assert "Served first." in page_at(f"{address}/page.html")

        (docs / "page.md").write_text("# A page\n\nServed after an edit.\n")
        deadline = time.monotonic() + 60
        while "Served after an edit." not in page_at(f"{address}/page.html"):
            assert time.monotonic() < deadline, "the edited page was not rebuilt within 60 s"
            time.sleep(0.5)
    reader.join(timeout=30)
