"""The token cache: a corpus encoded once per tokenizer, memory-mapped by the text and documents
data modules, giving the batches the in-memory path gives."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from helpers.config import compose_config
from helpers.experiment_scripts import run_python_script
from helpers.runs import CORPUS
from xfmr.data.documents import DocumentsDataModule
from xfmr.data.text import TextCorpusDataModule
from xfmr.objectives.clm import CausalLMObjective
from xfmr.text import build_once, token_cache
from xfmr.text.chunks import cut_chunks, encode_text
from xfmr.text.token_cache import INDEX_FILE, TOKENS_FILE, open_or_build, token_dtype
from xfmr.text.tokenizers import TextTokenizer, TokenizerSpec, train_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# Runs of spaces, blank lines, trailing spaces, tabs, punctuation, digits, accents, CJK: every
# place a careless cut changes what a pre-tokenizer sees.
VARIED = (
    "The quick brown fox -- jumps over 12 lazy dogs!\n"
    "  indented line   with  runs of spaces  \n"
    "\n\n"
    "Café au lait, s'il vous plaît; naïve résumé.\ttab\tseparated\n"
    "don't won't it's 3.14 x_y a+b (paren) [bracket] 中文 字符 mixed中文text\n"
) * 30


def _tokenizer(kind: str, text: str = VARIED) -> TextTokenizer:
    vocab = {"char": None, "byte_bpe": 300, "bpe": 200, "wordpiece": 200, "unigram": 150}[kind]
    return train_tokenizer(TokenizerSpec(kind=kind, vocab_size=vocab), iter([text]))


def _text_data(path: Path, cache_dir: Path | None, **options) -> TextCorpusDataModule:
    options = {"block_size": 16, "batch_size": 4, **options}
    cache = {"cache": True, "cache_dir": str(cache_dir)} if cache_dir else {}
    return TextCorpusDataModule(path=str(path), **cache, **options)


def _attach(data, tokenizer: TextTokenizer, caplog) -> str:
    """Attach and return what the token cache logged."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        data.attach(tokenizer, CausalLMObjective().collate)
    return "\n".join(r.getMessage() for r in caplog.records if "token cache" in r.getMessage())


def _caches(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.iterdir() if p.is_dir())


def _big_corpus(path: Path, megabytes: float) -> Path:
    """Lines of random words from CORPUS's vocabulary (so a char tokenizer trained on CORPUS
    knows every character)."""
    words = sorted(set(CORPUS.split()))
    rng = random.Random(0)
    line_count = int(megabytes * 1e6 / 60)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(line_count):
            f.write(" ".join(rng.choices(words, k=12)) + "\n")
    return path


# --------------------------------------------------------------------------- chunked encoding


@pytest.mark.parametrize("kind", ["char", "byte_bpe", "bpe", "wordpiece", "unigram"])
def test_encoding_in_chunks_gives_the_ids_of_the_whole_text(kind: str) -> None:
    tokenizer = _tokenizer(kind)
    chunks = list(cut_chunks([VARIED[i : i + 97] for i in range(0, len(VARIED), 97)], 50))
    assert "".join(chunks) == VARIED
    assert len(chunks) > 50  # the cuts are really exercised
    whole = tokenizer.encode(VARIED)
    assert encode_text(tokenizer, VARIED, chunk_chars=50).tolist() == whole


def test_char_ids_from_the_lookup_table_equal_the_tokenizers() -> None:
    """kind=char is encoded by a table of code points: unseen characters become <unk> and an
    added token in the text is matched whole, as the tokenizer itself does."""
    tokenizer = _tokenizer("char", CORPUS)
    for text in (VARIED, "the fox\n<unk> met the <unk>\tdog 中文\n"):
        assert encode_text(tokenizer, text, chunk_chars=50).tolist() == tokenizer.encode(text)
    assert tokenizer.encode("中")[0] == tokenizer.token_to_id("<unk>")


def test_cutting_at_line_ends_would_change_the_ids() -> None:
    """Why cuts are made at a space between two word characters, not at line ends: a chunk
    that starts a line gets a word-start marker the whole text does not have there."""
    for kind in ("bpe", "unigram"):
        tokenizer = _tokenizer(kind)
        lines = VARIED.splitlines(keepends=True)
        per_line = [i for line in lines for i in tokenizer.encode(line)]
        assert per_line != tokenizer.encode(VARIED), kind


# --------------------------------------------------------------------------- build once, reuse


def test_the_cache_is_built_once_and_memory_mapped_after(tmp_path: Path, corpus: Path, caplog):
    tokenizer = _tokenizer("char", CORPUS)
    first = _text_data(corpus, tmp_path / "tokens")
    assert "token cache: built" in _attach(first, tokenizer, caplog)
    (directory,) = _caches(tmp_path / "tokens")
    index_mtime = (directory / INDEX_FILE).stat().st_mtime_ns
    tokens_mtime = (directory / TOKENS_FILE).stat().st_mtime_ns

    second = _text_data(corpus, tmp_path / "tokens")
    logged = _attach(second, tokenizer, caplog)
    assert "token cache: built" not in logged
    assert f"memory-mapped {len(first.train_ids) + len(first.val_ids)} tokens" in logged
    assert (directory / INDEX_FILE).stat().st_mtime_ns == index_mtime
    assert (directory / TOKENS_FILE).stat().st_mtime_ns == tokens_mtime
    assert second._split is None  # the corpus was never read as one string
    memory = _text_data(corpus, None)
    memory.attach(tokenizer, CausalLMObjective().collate)
    assert second.train_ids[:].tolist() == memory.train_ids.tolist()
    assert second.val_ids[:].tolist() == memory.val_ids.tolist()


def test_a_changed_file_or_tokenizer_makes_a_new_cache(tmp_path: Path, corpus: Path, caplog):
    tokenizer = _tokenizer("char", CORPUS + "xyz")
    cache_dir = tmp_path / "tokens"
    assert "token cache: built" in _attach(_text_data(corpus, cache_dir), tokenizer, caplog)

    corpus.write_text(CORPUS + "xyz\n")  # new content and size
    data = _text_data(corpus, cache_dir)
    assert "token cache: built" in _attach(data, tokenizer, caplog)
    assert len(_caches(cache_dir)) == 2
    assert tokenizer.decode(data.val_ids[:].tolist()).endswith("xyz\n")

    before = corpus.stat()
    corpus.write_text(CORPUS.replace("fox", "dog") + "xyz\n")  # same size, other text
    os.utime(corpus, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    data = _text_data(corpus, cache_dir)
    assert "token cache: built" in _attach(data, tokenizer, caplog)
    assert "fox" not in tokenizer.decode(data.train_ids[:].tolist())
    assert len(_caches(cache_dir)) == 3

    other = _tokenizer("byte_bpe", CORPUS)
    data = _text_data(corpus, cache_dir)
    assert "token cache: built" in _attach(data, other, caplog)
    assert len(_caches(cache_dir)) == 4
    assert "token cache: built" not in _attach(_text_data(corpus, cache_dir), other, caplog)


# A builder in a process of its own, on a filesystem that refuses `flock` and `lockf` (Lustre
# mounted without flock, some NFS): the cache must not need them.
BUILD = """
import errno, fcntl, logging, sys
from pathlib import Path

def refused(*args, **kwargs):
    raise OSError(errno.ENOLCK, "No locks available")

fcntl.flock = fcntl.lockf = refused
from xfmr.text.token_cache import open_or_build
from xfmr.text.tokenizers import TextTokenizer
logging.basicConfig(level=logging.INFO, format="%(process)d %(message)s")
corpus, tokenizer, cache_dir = sys.argv[1:4]
cache = open_or_build([Path(corpus)], TextTokenizer.load(tokenizer), layout="text",
                      val_fraction=0.1, cache_dir=cache_dir, workers=1, chunk_chars=1 << 16)
print("published", cache.directory, cache.index["tokens"])
"""


def _start_build(corpus: Path, tokenizer: Path, cache_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", BUILD, str(corpus), str(tokenizer), str(cache_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _published(cache_dir: Path) -> list[Path]:
    """The cache folders a reader would trust by name (temporaries start with a dot)."""
    return [p for p in _caches(cache_dir) if not p.name.startswith(".")]


def _assert_whole(directory: Path) -> None:
    index = json.loads((directory / INDEX_FILE).read_text())
    size = (directory / TOKENS_FILE).stat().st_size
    assert size == index["tokens"] * np.dtype(index["dtype"]).itemsize, directory


def test_a_build_killed_halfway_is_not_used_and_is_redone(tmp_path: Path, caplog) -> None:
    corpus = _big_corpus(tmp_path / "big.txt", 4)
    tokenizer = _tokenizer("byte_bpe", CORPUS)  # slow enough to be caught halfway
    tokenizer.save(tmp_path / "tokenizer.json")
    cache_dir = tmp_path / "tokens"
    build = _start_build(corpus, tmp_path / "tokenizer.json", cache_dir)
    deadline = time.monotonic() + 60
    partial = []
    while not partial and build.poll() is None and time.monotonic() < deadline:
        partial = [p for p in cache_dir.glob(f".*.tmp/{TOKENS_FILE}") if p.stat().st_size > 0]
        time.sleep(0.01)
    build.send_signal(signal.SIGKILL)
    build.wait()
    assert partial, "the build finished before it could be killed: use a bigger corpus"
    assert not _published(cache_dir)  # only the temporary, and the dead builder's claim
    assert len(list(cache_dir.glob(f"*{build_once.CLAIM_SUFFIX}"))) == 1

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        cache = open_or_build(
            [corpus], tokenizer, layout="text", val_fraction=0.1, cache_dir=cache_dir
        )
    assert "stopped building" in caplog.text and "token cache: built" in caplog.text
    assert _caches(cache_dir) == [cache.directory]  # the killed build's folder removed
    assert not list(cache_dir.glob(f"*{build_once.CLAIM_SUFFIX}"))
    ids = cache.ids(0, cache.index["tokens"])[:]
    assert tokenizer.decode(ids.tolist()) == corpus.read_text()


def test_four_processes_needing_one_missing_cache_build_it_once(tmp_path: Path) -> None:
    """Four builders at once, `flock` refused: one builds, three wait for its folder; all map
    the same cache, and a reader watching throughout never sees a folder that is not whole."""
    corpus = _big_corpus(tmp_path / "big.txt", 2)
    tokenizer = _tokenizer("byte_bpe", CORPUS)  # slow enough for the four to overlap
    tokenizer.save(tmp_path / "tokenizer.json")
    cache_dir = tmp_path / "tokens"
    builds = [_start_build(corpus, tmp_path / "tokenizer.json", cache_dir) for _ in range(4)]
    looks = 0
    while any(b.poll() is None for b in builds):
        for directory in _published(cache_dir) if cache_dir.exists() else []:
            _assert_whole(directory)
            looks += 1
        time.sleep(0.005)
    outputs = [b.communicate(timeout=120)[0] for b in builds]
    assert [b.returncode for b in builds] == [0, 0, 0, 0], outputs
    assert sum("token cache: built" in out for out in outputs) == 1, outputs
    assert sum("token cache: waiting for process" in out for out in outputs) == 3, outputs
    published = {line for out in outputs for line in out.splitlines() if "published" in line}
    assert len(published) == 1, outputs  # one folder, one count of tokens, for all four
    (directory,) = _caches(cache_dir)
    assert not list(cache_dir.glob(f"*{build_once.CLAIM_SUFFIX}"))
    assert looks > 0  # waiters poll every POLL_SECONDS: the reader looks meanwhile
    _assert_whole(directory)
    index = json.loads((directory / INDEX_FILE).read_text())
    tokens = np.memmap(directory / TOKENS_FILE, dtype=index["dtype"], mode="r")
    assert tokenizer.decode(tokens.tolist()) == corpus.read_text()


def test_a_build_published_first_elsewhere_is_kept_and_this_one_discarded(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Should two builds run at once (a claim broken as stale from a builder that was only
    slow), the second to finish finds the name taken and keeps the first's cache."""
    (tmp_path / "a.txt").write_text(VARIED)
    tokenizer = _tokenizer("char", VARIED)
    options = {"layout": "text", "val_fraction": 0.1, "cache_dir": tmp_path / "tokens"}
    first = open_or_build([tmp_path / "a.txt"], tokenizer, **options)
    elsewhere = tmp_path / "elsewhere"
    first.directory.rename(elsewhere)
    real_build = token_cache._build

    def build_while_another_publishes(folder, *args):
        index = real_build(folder, *args)
        elsewhere.rename(first.directory)  # the other builder's rename lands first
        return index

    monkeypatch.setattr(token_cache, "_build", build_while_another_publishes)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        second = open_or_build([tmp_path / "a.txt"], tokenizer, **options)
    assert "this build discarded" in caplog.text
    assert second.directory == first.directory and second.index == first.index
    assert _caches(tmp_path / "tokens") == [first.directory]  # the discarded folder removed


def test_a_claim_left_by_a_builder_on_another_host_is_broken_once_stale(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Another host's pid cannot be checked: a claim nobody touches for STALE_SECONDS is taken
    over; one that its builder keeps touching is waited for."""
    (tmp_path / "a.txt").write_text(VARIED)
    tokenizer = _tokenizer("char", VARIED)
    cache_dir = tmp_path / "tokens"
    options = {"layout": "text", "val_fraction": 0.1, "cache_dir": cache_dir}
    directory = open_or_build([tmp_path / "a.txt"], tokenizer, **options).directory
    shutil.rmtree(directory)
    claim = directory.with_name(directory.name + build_once.CLAIM_SUFFIX)
    claim.write_text("another-host 1 0123456789abcdef")
    monkeypatch.setattr(build_once, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(build_once, "STALE_SECONDS", 0.3)
    started = time.monotonic()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        cache = open_or_build([tmp_path / "a.txt"], tokenizer, **options)
    assert time.monotonic() - started >= 0.3
    assert "waiting for process 1 on another-host" in caplog.text
    assert "stopped building" in caplog.text and "token cache: built" in caplog.text
    assert cache.directory == directory and not claim.exists()

    published = tmp_path / "published"
    directory.rename(published)
    claim.write_text("another-host 1 0123456789abcdef")
    polls = []
    real_sleep = time.sleep

    def the_other_builder_alive(seconds: float) -> None:  # touches its claim, then publishes
        real_sleep(seconds)
        polls.append(1)
        if len(polls) < 60:
            os.utime(claim, ns=(len(polls) * 10**9, len(polls) * 10**9))
        elif len(polls) == 60:
            published.rename(directory)
            claim.unlink()

    monkeypatch.setattr(build_once.time, "sleep", the_other_builder_alive)
    started = time.monotonic()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        cache = open_or_build([tmp_path / "a.txt"], tokenizer, **options)
    assert time.monotonic() - started > 2 * build_once.STALE_SECONDS
    assert "stopped building" not in caplog.text and "token cache: built" not in caplog.text
    assert cache.directory == directory


# --------------------------------------------------------------------------- ids and dtype


@pytest.mark.parametrize("kind", ["char", "byte_bpe"])
def test_cached_ids_decode_to_the_text(tmp_path: Path, kind: str) -> None:
    (tmp_path / "a.txt").write_text(VARIED[:3000], encoding="utf-8")
    (tmp_path / "b.txt").write_text("second file\r\nwith windows newlines\n", encoding="utf-8")
    files = sorted(tmp_path.glob("*.txt"))
    text = "".join(f.read_text(encoding="utf-8") for f in files)  # universal newlines
    tokenizer = _tokenizer(kind, text)
    cache = open_or_build(
        files, tokenizer, layout="text", val_fraction=0.25, cache_dir=tmp_path / "c", chunk_chars=64
    )
    split, total = cache.index["train_tokens"], cache.index["tokens"]
    assert tokenizer.decode(cache.ids(0, split)[:].tolist()) == text[: int(len(text) * 0.75)]
    assert tokenizer.decode(cache.ids(split, total)[:].tolist()) == text[int(len(text) * 0.75) :]
    assert cache.dtype == np.uint16


@pytest.mark.parametrize("layout", ["text", "documents"])
def test_a_parallel_build_writes_the_ids_in_order(tmp_path: Path, layout: str) -> None:
    corpus = _documents(tmp_path / "d.txt", 400)  # about 60 kB: 30 chunks of 2000 characters
    tokenizer = _tokenizer("byte_bpe", CORPUS)
    built = {}
    for workers in (1, 2):
        cache = open_or_build(
            [corpus],
            tokenizer,
            layout=layout,
            val_fraction=0.1,
            cache_dir=tmp_path / f"workers{workers}",
            workers=workers,
            chunk_chars=2000,
        )
        built[workers] = cache.ids(0, cache.index["tokens"])[:].tolist()
    assert built[1] == built[2]
    if layout == "text":
        assert tokenizer.decode(built[2]) == corpus.read_text()


def test_ids_are_uint16_while_they_fit_and_uint32_beyond(tmp_path: Path) -> None:
    assert token_dtype(65_536) == np.uint16 and token_dtype(65_537) == np.uint32
    # A word-level vocabulary of 70 000 pieces whose letters have ids above 65 535.
    vocab = {f"<filler{i}>": i for i in range(70_000 - 27)}
    vocab.update({c: 70_000 - 27 + i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")})
    big = Tokenizer(models.WordLevel(vocab, unk_token="<filler0>"))
    big.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer = TextTokenizer(big)
    (tmp_path / "t.txt").write_text("a quick brown fox " * 20)
    cache = open_or_build(
        [tmp_path / "t.txt"], tokenizer, layout="text", val_fraction=0.1, cache_dir=tmp_path / "c"
    )
    assert cache.dtype == np.uint32
    ids = cache.ids(0, cache.index["tokens"])[:].tolist()
    assert ids == tokenizer.encode("a quick brown fox " * 20) and max(ids) > 65_535


# --------------------------------------------------------------------------- same batches


def test_cached_text_batches_equal_the_in_memory_batches(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(VARIED[:2000])
    (tmp_path / "b.txt").write_text(VARIED[2000:4000])
    tokenizer = _tokenizer("byte_bpe")
    for stride in (1, 5):
        loaders = []
        for cache_dir in (tmp_path / "tokens", None):
            data = _text_data(tmp_path, cache_dir, train_stride=stride)
            data.attach(tokenizer, CausalLMObjective().collate)
            torch.manual_seed(7)
            train = [b["input_ids"] for (b,) in data.train_dataloader()]  # windows of one
            val = [b["input_ids"] for b in data.val_dataloader()]
            loaders.append((train, val))
        (cached_train, cached_val), (memory_train, memory_val) = loaders
        assert len(cached_train) == len(memory_train) > 10
        assert all(torch.equal(a, b) for a, b in zip(cached_train, memory_train, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(cached_val, memory_val, strict=True))
        assert cached_train[0].dtype == torch.long


def _documents(path: Path, n_documents: int) -> Path:
    rng = random.Random(1)
    words = sorted(set(CORPUS.split()))
    documents = [
        "\n".join(
            " ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(rng.randint(1, 6))
        )
        for _ in range(n_documents)
    ]
    path.write_text("\n\n   \n".join(documents) + "\n")
    return path


def test_cached_documents_give_the_in_memory_sentence_pairs(tmp_path: Path, caplog) -> None:
    _documents(tmp_path / "a.txt", 30)
    _documents(tmp_path / "b.txt", 12)
    tokenizer = _tokenizer("wordpiece", CORPUS)
    drawn = []
    for cache in (True, False):
        data = DocumentsDataModule(
            path=str(tmp_path), batch_size=5, cache=cache, cache_dir=str(tmp_path / "tokens")
        )
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="xfmr"):
            data.attach(tokenizer, list)
        assert ("token cache: built" in caplog.text) == cache
        torch.manual_seed(3)
        windows = [w for _ in range(2) for w in data.train_dataloader()]  # of one batch
        train = [pair for (batch,) in windows for pair in batch]
        val = [pair for batch in data.val_dataloader() for pair in batch]
        drawn.append((train, val, list(data.training_text_sample(10**6))))
    (cached_train, cached_val, cached_text), (memory_train, memory_val, memory_text) = drawn
    assert len(cached_train) > 40 and cached_train == memory_train
    assert cached_val == memory_val
    assert "".join(cached_text) == "".join(memory_text) == data.split_text()[0]


def test_a_tiny_run_builds_the_cache_and_the_next_run_maps_it(tmp_path: Path, caplog) -> None:
    from xfmr.training.run import run_training

    corpus = tmp_path / "mine.txt"  # compose_config rewrites its own corpus every call
    corpus.write_text(CORPUS)
    common = ["data=text", f"data.path={corpus}", "data.block_size=16", "tokenizer=char"]
    common += [f"paths.cache_dir={tmp_path / 'cache'}"]
    for run, expected in (("one", "token cache: built"), ("two", "memory-mapped")):
        cfg = compose_config(tmp_path, [*common, f"paths.output_dir={tmp_path / run}"])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="xfmr"):
            results = run_training(cfg)
        assert results["status"] == "completed"
        assert expected in caplog.text
        assert run == "one" or "token cache: built" not in caplog.text
    assert len(_caches(tmp_path / "cache" / "tokens")) == 1

    cfg = compose_config(
        tmp_path, [*common, "data.cache=false", f"paths.output_dir={tmp_path / 'three'}"]
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="xfmr"):
        assert run_training(cfg)["status"] == "completed"
    assert "token cache" not in caplog.text


# --------------------------------------------------------------------------- memory


MEASURE = """
import resource, sys, torch
from xfmr.data.text import TextCorpusDataModule
from xfmr.objectives.clm import CausalLMObjective
from xfmr.text.tokenizers import TextTokenizer
corpus, tokenizer, cache_dir = sys.argv[1:4]
torch.manual_seed(0)
data = TextCorpusDataModule(path=corpus, cache=True, cache_dir=cache_dir, block_size=64,
                            batch_size=32, train_stride=1)
data.attach(TextTokenizer.load(tokenizer), CausalLMObjective().collate)
for _, batch in zip(range(100), data.train_dataloader()):
    pass
for _, batch in zip(range(20), data.val_dataloader()):
    pass
print(len(data.train_ids), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _measure_in_a_process(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    """MEASURE in a process of its own, whose peak RSS is its own (`run_python_script`: forked
    from the server that has torch imported, where a fork behaves as a fresh start). Both
    corpora are measured the same way, so what the start leaves in the peak cancels out of
    their difference."""
    script = tmp_path / "measure.py"
    script.write_text(MEASURE)
    return run_python_script(script, args, {"OMP_NUM_THREADS": "1"}, cwd=tmp_path)


@pytest.mark.slow
def test_memory_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    """Build the cache, then read batches from it: the peak RSS of a corpus 8x larger grows by
    far less than its ids would take in memory, with a window at every offset (the training
    order is computed index by index, not held as a list of every offset)."""
    tokenizer = _tokenizer("char", CORPUS)
    tokenizer.save(tmp_path / "tokenizer.json")
    peaks = {}
    for name, megabytes in (("small", 3), ("large", 24)):
        corpus = _big_corpus(tmp_path / f"{name}.txt", megabytes)
        args = [str(corpus), str(tmp_path / "tokenizer.json"), str(tmp_path / "tokens")]
        done = _measure_in_a_process(tmp_path, args)
        assert done.returncode == 0, done.stderr
        tokens, peak_kib = map(int, done.stdout.split())
        peaks[name] = (tokens, peak_kib * 1024)
    grown_tokens = peaks["large"][0] - peaks["small"][0]
    grown_bytes = peaks["large"][1] - peaks["small"][1]
    assert grown_tokens > 18_000_000
    # In memory the extra ids alone take 8 bytes a token (int64), 150 MB here; what the cached
    # path grows by is the sampler's list of windows and the pages of the file it touched.
    assert grown_bytes < 0.5 * 8 * grown_tokens, f"peak RSS grew by {grown_bytes / 1e6:.0f} MB"


def test_a_later_run_does_not_count_the_corpus_again(tmp_path: Path, monkeypatch) -> None:
    """Where the training split ends is known from the files' identity the second time, so a
    large corpus is not read again just to find it; a changed file is counted afresh."""
    from xfmr.text import corpus_files

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    counted = []
    real = corpus_files._count_chars
    monkeypatch.setattr(
        corpus_files, "_count_chars", lambda files: counted.append(1) or real(files)
    )
    first = corpus_files.count_chars([corpus], tmp_path / "cache")
    assert corpus_files.count_chars([corpus], tmp_path / "cache") == first == len(CORPUS)
    assert len(counted) == 1
    corpus.write_text(CORPUS + "more text\n")
    assert corpus_files.count_chars([corpus], tmp_path / "cache") == len(CORPUS) + 10
    assert len(counted) == 2
