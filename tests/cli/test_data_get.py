"""`xfmr-data get NAME` and `xfmr-data list`: the data sets the shipped experiments read, fetched,
checked and laid out; and the table that says where they come from, held to the experiments
and the docs.

Nothing here reaches the network: every host but 127.0.0.1 fails to resolve (as with no
network), and the downloads come from a local http.server or file:// URLs through a table of
the real data sets' layout with small made-up files (`fake_table`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from helpers import ROOT
from helpers.docs import block
from xfmr.cli.data import DEFAULT_DATA_DIR, main
from xfmr.data.formats.conll import read_conll
from xfmr.data.formats.delimited import read_delimited
from xfmr.data.sources import DATA_SETS, DataSet, Download, experiment_paths, users
from xfmr.paths import config_dir

EXPERIMENTS = experiment_paths(config_dir() / "experiment")
HEX64 = re.compile(r"[0-9a-f]{64}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any host but 127.0.0.1 fails to resolve, as it does without a network."""
    resolve = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)


class _Files(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = self.server.files.get(self.path)  # type: ignore[attr-defined]
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    """A local HTTP server of `server.files` (URL path -> bytes), stopped after the test."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    httpd.files, httpd.requests = {}, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pack(download: Download, members: dict[str | None, bytes]) -> bytes:
    if download.unpack == "none":
        return members[None]
    if download.unpack == "gunzip":
        return gzip.compress(members[None])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", b"not laid out\n")
        for name, data in members.items():
            archive.writestr(str(name), data)
    return buffer.getvalue()


def fake_table(base: str) -> tuple[tuple[DataSet, ...], dict[str, bytes], dict[str, bytes]]:
    """The real data sets (names, files, archive members, unpacking, which files are pinned)
    with made-up contents served under `base`: (the table, URL path -> bytes served, data path
    -> bytes laid out)."""
    served: dict[str, bytes] = {}
    laid_out: dict[str, bytes] = {}
    table = []
    for data_set in DATA_SETS:
        moved = {}
        for download in data_set.downloads:
            files = [f for f in data_set.files if f.source == download]
            for f in files:
                laid_out[f.path] = "".join(f"{f.path} line {i}\n" for i in range(200)).encode()
            body = _pack(download, {f.member: laid_out[f.path] for f in files})
            path = "/" + download.url.split("://", 1)[1]
            served[path] = body
            moved[download] = Download(base + path, len(body), _sha256(body), download.unpack)
        files = []
        for f in data_set.files:
            source = moved[f.source]
            if f.source.unpack != "none" and f.sha256 is not None:
                data = laid_out[f.path]
                files.append(replace(f, source=source, size=len(data), sha256=_sha256(data)))
            else:
                files.append(replace(f, source=source))
        table.append(replace(data_set, files=tuple(files)))
    return tuple(table), served, laid_out


@pytest.fixture
def fake(server: ThreadingHTTPServer) -> tuple[tuple[DataSet, ...], dict[str, bytes]]:
    table, served, laid_out = fake_table(f"http://127.0.0.1:{server.server_address[1]}")
    server.files.update(served)  # type: ignore[attr-defined]
    return table, laid_out


def xfmr_data(args: list[str], table, capsys) -> tuple[int, str, str]:
    """`xfmr-data ARGS` in this process against `table`: (exit status, stdout, stderr)."""
    try:
        main(args, data_sets=table)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_get_lays_out_unpacked_renamed_files_and_prints_the_commands(fake, tmp_path, capsys):
    table, laid_out = fake
    data = tmp_path / "data"
    code, out, err = xfmr_data(
        ["get", "multi30k", "sst2", "conll2003", "--data-dir", str(data)], table, capsys
    )
    assert code == 0, err
    names = ("multi30k/", "sst2/", "conll2003/")
    assert files_under(data) == {p: b for p, b in laid_out.items() if p.startswith(names)}
    conll = next(d for d in table if d.name == "conll2003")
    assert [f.member for f in conll.files if f.path == "conll2003/dev.txt"] == ["valid.txt"]
    assert (data / "conll2003/dev.txt").read_bytes() == laid_out["conll2003/dev.txt"]
    for experiment in ("transformer_multi30k", "bert_sst2", "bert_conll"):
        assert f"xfmr-train experiment={experiment} paths.data_dir={data}\n" in out
    assert f"{data / 'multi30k/train.de'}: written, " in out


def test_a_second_get_skips_what_is_there(fake, server, tmp_path, capsys, monkeypatch):
    table, laid_out = fake
    monkeypatch.chdir(tmp_path)  # the default --data-dir: ./data
    assert xfmr_data(["get", "tinyshakespeare", "sst2"], table, capsys)[0] == 0
    requests = list(server.requests)
    code, out, err = xfmr_data(["get", "tinyshakespeare", "sst2"], table, capsys)
    assert code == 0, err
    assert server.requests == requests, "nothing is fetched again"
    data = tmp_path / DEFAULT_DATA_DIR
    assert f"{data / 'tinyshakespeare/input.txt'}: present, " in out
    assert "sha256 checked" in out and "no pinned sha256" in out  # sst2/train.tsv: none pins it
    assert f"xfmr-train experiment=nanogpt_shakespeare_char paths.data_dir={data}" in out


def test_a_wrong_file_present_is_refused_and_kept_until_force(fake, server, tmp_path, capsys):
    table, laid_out = fake
    data = tmp_path / "data"
    corrupt = data / "multi30k" / "val.en"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"not the captions\n")
    code, out, err = xfmr_data(["get", "multi30k", "--data-dir", str(data)], table, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{corrupt} is present but is not the file xfmr-data gets" in err and "--force" in err
    assert corrupt.read_bytes() == b"not the captions\n"
    assert server.requests == [], "refused before anything is fetched"
    code, out, err = xfmr_data(
        ["get", "multi30k", "--force", "--data-dir", str(data)], table, capsys
    )
    assert code == 0, err
    assert corrupt.read_bytes() == laid_out["multi30k/val.en"]


def test_a_download_other_than_its_pin_writes_nothing(fake, server, tmp_path, capsys, monkeypatch):
    table, _ = fake
    scratch = tmp_path / "scratch"  # where downloads land before they are checked
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    zipped = next(d for d in table if d.name == "sst2").downloads[0]
    server.files["/" + zipped.url.split("/", 3)[3]] += b"tampered"  # an archive of another sha256
    plain = tmp_path / "input.txt"  # a file:// source that is not its pin either
    plain.write_bytes(b"some other text\n")
    shakespeare = next(d for d in table if d.name == "tinyshakespeare")
    wrong = Download(plain.as_uri(), 16, "0" * 64)
    table = tuple(
        replace(d, files=(replace(d.files[0], source=wrong),)) if d is shakespeare else d
        for d in table
    )
    data = tmp_path / "data"
    for name in ("sst2", "tinyshakespeare"):
        code, out, err = xfmr_data(["get", name, "--data-dir", str(data)], table, capsys)
        assert code == 1 and "nothing was written" in err and "xfmr-data expects" in err, err
        assert "Traceback" not in err
    assert not data.exists() or files_under(data) == {}
    assert list(scratch.iterdir()) == []


def test_a_member_other_than_its_own_pin_is_not_written(fake, server, tmp_path, capsys):
    table, laid_out = fake
    sst2 = next(d for d in table if d.name == "sst2")
    dev = next(f for f in sst2.files if f.sha256 is not None)
    table = tuple(
        replace(d, files=tuple(replace(f, sha256="0" * 64) if f is dev else f for f in d.files))
        if d is sst2 else d
        for d in table
    )  # fmt: skip
    data = tmp_path / "data"
    code, out, err = xfmr_data(["get", "sst2", "--data-dir", str(data)], table, capsys)
    assert code == 1 and f"{dev.path} from {dev.source.url} is " in err, err
    assert files_under(data) == {"sst2/train.tsv": laid_out["sst2/train.tsv"]}


def test_without_a_network_it_says_where_each_file_goes_by_hand(tmp_path, capsys):
    data = tmp_path / "data"
    code, out, err = xfmr_data(
        ["get", "multi30k", "sst2", "--data-dir", str(data)], DATA_SETS, capsys
    )
    assert code == 1 and "Traceback" not in err
    first = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/train.de.gz"
    assert f"cannot download {first} (" in err
    assert f"`xfmr-data get multi30k sst2 --data-dir {data}`" in err
    for data_set in (d for d in DATA_SETS if d.name in ("multi30k", "sst2")):
        for f in data_set.files:
            how = {"none": "save as", "gunzip": "gunzip to", "unzip": f"unzip {f.member} to"}
            assert f"  {f.source.url} -> {how[f.source.unpack]} {data / f.path}\n" in err + "\n"
    assert not data.exists() or files_under(data) == {}


def test_a_source_that_does_not_answer_or_is_gone_gets_the_same_message(
    fake, server, tmp_path, capsys
):
    table, _ = fake
    silent = socket.socket()  # accepts connections (the kernel's backlog), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/input.txt"
    shakespeare = next(d for d in table if d.name == "tinyshakespeare")
    gone = next(d for d in table if d.name == "squad").files[0].source.url + ".gone"
    data = tmp_path / "data"
    try:
        for source, cause in ((url, "no answer within 0.3 s"), (gone, "HTTP 404")):
            moved = replace(shakespeare.files[0].source, url=source)
            table_ = tuple(
                replace(d, files=(replace(d.files[0], source=moved),)) if d is shakespeare else d
                for d in table
            )
            args = ["get", "tinyshakespeare", "--timeout", "0.3", "--data-dir", str(data)]
            code, out, err = xfmr_data(args, table_, capsys)
            assert code == 1 and f"cannot download {source} ({cause}" in err, err
            assert f"-> save as {data / 'tinyshakespeare/input.txt'}" in err
    finally:
        silent.close()


def test_list_says_what_each_is_where_from_who_reads_it_and_if_here(fake, tmp_path, capsys):
    table, _ = fake
    data = tmp_path / "data"
    assert xfmr_data(["get", "tinyshakespeare", "--data-dir", str(data)], table, capsys)[0] == 0
    code, out, err = xfmr_data(["list", "--data-dir", str(data)], DATA_SETS, capsys)
    assert code == 0, err
    assert f"paths.data_dir={data}" in out
    assert "tinyshakespeare: 1 of 1 files present but not right" in out  # made-up bytes
    assert "sst2: missing" in out and "squad: missing" in out
    assert "source: https://dl.fbaipublicfiles.com/glue/data/SST-2.zip (7.4 MB)" in out
    assert "read by: experiment=bert_mlm, experiment=bert_pretrain," in out
    code, out, err = xfmr_data(["list", "--data-dir", str(data)], table, capsys)
    assert "tinyshakespeare: present, sha256 checked" in out


def test_an_unknown_name_lists_the_valid_ones(capsys):
    code, out, err = xfmr_data(["get", "bert_sst2"], DATA_SETS, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "there is no data set 'bert_sst2': choose from tinyshakespeare, multi30k," in err
    assert "experiment bert_sst2 reads sst2: xfmr-data get sst2" in err


def test_help_answers_in_under_a_second_without_torch(tmp_path):
    probe = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "sys.argv = ['xfmr-data', '--help']\n"
        "from xfmr.cli.data import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(time.perf_counter() - start)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    *_, seconds, heavy = done.stdout.strip().splitlines()
    assert "xfmr-data get sst2 conll2003 --data-dir" in done.stdout
    assert heavy == "[]" and float(seconds) < 1.0, done.stdout


def test_every_file_an_experiment_names_is_one_xfmr_data_gets():
    known = {f.path for d in DATA_SETS for f in d.files}
    unknown = {e: [p for p in paths if p not in known] for e, paths in EXPERIMENTS.items()}
    assert {e: p for e, p in unknown.items() if p} == {}, "add them to xfmr.data.sources"
    assert "bert_squad" in EXPERIMENTS and "squad/dev-v1.1.json" in EXPERIMENTS["bert_squad"]


def test_each_experiment_header_names_its_get_command():
    readers = users(DATA_SETS, EXPERIMENTS)
    for experiment in EXPERIMENTS:
        text = (config_dir() / "experiment" / f"{experiment}.yaml").read_text()
        header = "".join(line for line in text.splitlines(True) if line.startswith("#"))
        header = " ".join(header.replace("#", " ").split())
        for name in (d for d, readers_ in readers.items() if experiment in readers_):
            assert f"xfmr-data get {name}" in header, experiment


def test_every_get_in_the_docs_and_configs_names_a_data_set():
    names = {d.name for d in DATA_SETS}
    texts = [ROOT / "docs" / "datasets.md", *sorted((config_dir() / "experiment").glob("*.yaml"))]
    for path in texts:
        for words in re.findall(r"xfmr-data get ((?:[a-z0-9]+ ?)+)", path.read_text()):
            assert set(words.split()) <= names, (path, words)


def test_the_docs_table_says_who_reads_each_data_set():
    readers = users(DATA_SETS, EXPERIMENTS)
    rows = re.findall(
        r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", (ROOT / "docs/datasets.md").read_text(), re.M
    )
    assert {name: sorted(re.findall(r"`(\w+)`", used)) for name, used in rows} == {
        name: sorted(experiments) for name, experiments in readers.items()
    }


def test_the_docs_commands_run(fake, tmp_path, capsys, monkeypatch):
    table, _ = fake
    monkeypatch.chdir(tmp_path)
    commands = [shlex.split(line) for line in block("data-get").splitlines() if line.strip()]
    assert all(words[0] == "xfmr-data" for words in commands)
    for words in commands:
        code, out, err = xfmr_data(words[1:], table, capsys)
        assert code == 0, (words, err)
    assert (tmp_path / "elsewhere/data/conll2003/dev.txt").is_file()


def test_the_default_data_dir_is_paths_data_dir():
    paths = yaml.safe_load((config_dir() / "paths" / "default.yaml").read_text())
    assert paths["root_dir"] == "${hydra:runtime.cwd}"
    assert paths["data_dir"] == "${paths.root_dir}/" + DEFAULT_DATA_DIR.as_posix()


def test_the_pins_are_well_formed():
    for data_set in DATA_SETS:
        assert data_set.name == data_set.files[0].path.split("/")[0]
        for f in data_set.files:
            assert f.path.startswith(f"{data_set.name}/")
            size, sha256 = f.source.size, f.source.sha256
            assert size and size > 0 and sha256 and HEX64.fullmatch(sha256), f.path
            if f.source.unpack == "none":
                assert f.size is None and f.sha256 is None, "a plain file's pin is its download's"
            assert (f.size is None) == (f.sha256 is None), f.path
            assert f.sha256 is None or HEX64.fullmatch(f.sha256), f.path


def test_the_sources_formats_read_with_the_experiments_settings(tmp_path):
    """GLUE's SST-2 (`sentence<TAB>label`, a space before the tab) and CoNLL-2003's four columns
    with -DOCSTART- lines, as the archives hold them, read as bert_sst2 and bert_conll read."""
    experiment = config_dir() / "experiment"
    sst2 = yaml.safe_load((experiment / "bert_sst2.yaml").read_text())["data"]
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("sentence\tlabel\nit 's a charming journey . \t1\na dull film . \t0\n")
    rows, _ = read_delimited(tsv, text_field=sst2["text_field"], label_field=sst2["label_field"])
    assert [(r.text, r.label) for r in rows] == [
        ("it 's a charming journey .", "1"),
        ("a dull film .", "0"),
    ]
    conll = yaml.safe_load((experiment / "bert_conll.yaml").read_text())["data"]
    txt = tmp_path / "dev.txt"
    txt.write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n"
    )
    sentences, _ = read_conll(
        txt, token_column=conll["token_column"], tag_column=conll["tag_column"]
    )
    assert [(s.tokens, s.tags) for s in sentences] == [
        (["EU", "rejects"], ["B-ORG", "O"]),
        (["Peter"], ["B-PER"]),
    ]


def test_a_missing_data_file_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    from xfmr.data.sources import fetch_hint

    data = tmp_path / "data"
    assert fetch_hint(data / "multi30k" / "train.de") == (
        f"; `xfmr-data get multi30k --data-dir {data}` fetches it there"
    )
    assert fetch_hint("sst2/dev.tsv") == "; `xfmr-data get sst2 --data-dir .` fetches it there"
    assert fetch_hint(tmp_path / "mine.txt") == ""
    from helpers.config import compose_config
    from xfmr.errors import UserError

    overrides = ["experiment=transformer_multi30k", "data=parallel", f"paths.data_dir={data}"]
    with pytest.raises(UserError, match=r"does not exist; `xfmr-data get multi30k --data-dir "):
        compose_config(tmp_path, overrides)
