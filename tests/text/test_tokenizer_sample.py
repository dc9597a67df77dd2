"""The tokenizer trains on a bounded head of the training split (`tokenizer.train_sample_mb`),
read a chunk at a time: exactly that text, the same as training on the whole text when the bound
covers it, and without holding the corpus in memory."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.experiment_scripts import run_python_script
from xfmr.data.text import TextCorpusDataModule
from xfmr.errors import UserError
from xfmr.parts.tokenizer import prepare_tokenizer
from xfmr.text.sample import BYTES_PER_MB, survey, training_text
from xfmr.text.tokenizers import TokenizerSpec, text_fingerprint, train_tokenizer

SETTINGS = {
    "char": {"kind": "char", "special_tokens": ["<unk>"]},
    "byte_bpe": {
        "kind": "byte_bpe",
        "vocab_size": 300,
        "special_tokens": ["<|endoftext|>"],
        "unk_token": None,
    },
    "bpe": {"kind": "bpe", "vocab_size": 120, "special_tokens": ["<unk>"]},
    "wordpiece": {
        "kind": "wordpiece",
        "vocab_size": 1000,  # past every merge: each word of the corpus ends as one piece
        "special_tokens": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    },
    "unigram": {"kind": "unigram", "vocab_size": 60, "special_tokens": ["<pad>", "</s>", "<unk>"]},
}
# The tokenizers library breaks ties differently from one training to the next on the same text:
# Unigram orders equal pieces differently (the pieces are compared, not ids) and WordPiece takes
# another path of merges (the pieces a text is cut into are compared, every word being merged).
UNORDERED = ("wordpiece", "unigram")


def _same(kind: str, a, b, text: str) -> bool:
    if kind == "wordpiece":
        return _pieces(a, text) == _pieces(b, text)
    vocab, other = a.tokenizer.get_vocab(), b.tokenizer.get_vocab()
    return set(vocab) == set(other) if kind == "unigram" else vocab == other


def _pieces(tokenizer, text: str) -> list[str]:
    return tokenizer.tokenizer.encode(text, add_special_tokens=False).tokens


HEAD = "the quick brown fox jumps over the lazy dog.\na small cat sees a big bird.\n" * 30
# Only after the head: a word frequent enough to earn merges, and a character of its own.
TAIL = "zyzzyva zyzzyva quixotic zyzzyva §\n" * 30


def _spec(kind: str, **tokenizer) -> TokenizerSpec:
    return TokenizerSpec.read({**SETTINGS[kind], **tokenizer})


def _corpus(tmp_path: Path, text: str) -> TextCorpusDataModule:
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    # A small val_fraction: the validation tail is a few characters of TAIL.
    return TextCorpusDataModule(path=str(path), val_fraction=0.01)


def _prepare(tmp_path: Path, data, kind: str, run: str, **tokenizer):
    run_dir = tmp_path / run
    run_dir.mkdir()
    spec = _spec(kind, **tokenizer)
    return prepare_tokenizer(
        spec, data, run_dir, cache_dir=str(tmp_path / "cache"), objective="clm"
    )


@pytest.mark.parametrize("kind", list(SETTINGS))
def test_the_default_bound_trains_as_on_the_whole_training_text(tmp_path: Path, kind) -> None:
    data = _corpus(tmp_path, HEAD + TAIL)
    whole_text = data.split_text()[0]
    tokenizer = _prepare(tmp_path, data, kind, "run")
    spec = TokenizerSpec(**SETTINGS[kind])
    expected = train_tokenizer(spec, iter([whole_text]))
    assert _same(kind, tokenizer, expected, whole_text)
    if kind not in UNORDERED:
        assert tokenizer.encode(whole_text) == expected.encode(whole_text)
    # The cache key is today's for a corpus the bound covers: cached tokenizers stay valid.
    sample = survey(data, round(256 * BYTES_PER_MB))
    assert sample.whole
    assert sample.fingerprint == text_fingerprint([whole_text])


# Not wordpiece: its ties make two trainings on one text differ, and once every word is merged
# (as `_same` needs) a chunk cut inside a word would go unnoticed.
@pytest.mark.parametrize("kind", ["byte_bpe", "bpe", "unigram"])
def test_chunks_cut_between_words_train_as_the_whole_text(tmp_path: Path, kind) -> None:
    """Many chunks, each pre-tokenized on its own, count the words the whole text holds (chunks
    of 300 characters cut anywhere would not: these kinds then learn other pieces)."""
    data = _corpus(tmp_path, HEAD + TAIL)
    whole_text = data.split_text()[0]
    chunks = list(training_text(data, 10**9, chunk_chars=300))
    assert len(chunks) > 10 and "".join(chunks) == whole_text
    spec = TokenizerSpec(**SETTINGS[kind])
    chunked = train_tokenizer(spec, iter(chunks))
    assert _same(kind, chunked, train_tokenizer(spec, iter([whole_text])), whole_text)


@pytest.mark.parametrize("kind", ["byte_bpe", "bpe"])
def test_a_smaller_bound_trains_on_exactly_the_head(tmp_path: Path, kind, caplog) -> None:
    data = _corpus(tmp_path, HEAD + TAIL)
    bound_mb = len(HEAD.encode()) / BYTES_PER_MB
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        tokenizer = _prepare(tmp_path, data, kind, "run", train_sample_mb=bound_mb)
    spec = TokenizerSpec(**SETTINGS[kind])
    on_head = train_tokenizer(spec, iter([HEAD]))
    on_whole = train_tokenizer(spec, iter([data.split_text()[0]]))
    assert tokenizer.tokenizer.get_vocab() == on_head.tokenizer.get_vocab()
    assert on_whole.tokenizer.get_vocab() != on_head.tokenizer.get_vocab()
    learnt = [p for p in on_whole.pieces() if "zyzz" in p]  # merges only the tail teaches
    assert learnt and not any("zyzz" in p for p in tokenizer.pieces())
    assert "tokenizer.train_sample_mb" in caplog.text


def test_a_char_tokenizer_lacks_characters_after_the_sample_and_says_so(
    tmp_path: Path, caplog
) -> None:
    data = _corpus(tmp_path, HEAD + TAIL)
    bound_mb = len(HEAD.encode()) / BYTES_PER_MB
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        tokenizer = _prepare(tmp_path, data, "char", "cut", train_sample_mb=bound_mb)
    unk = tokenizer.token_to_id("<unk>")
    assert tokenizer.encode("§") == [unk]  # "§" is only in TAIL
    assert tokenizer.encode("fox") != [unk] * 3
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "<unk>" in warning[0] and "train_sample_mb" in warning[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="xfmr"):
        whole = _prepare(tmp_path, data, "char", "whole")
    assert whole.encode("§") != [whole.token_to_id("<unk>")]
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_the_cache_key_is_the_sample_read(tmp_path: Path, caplog) -> None:
    """Two bounds past the corpus read the same text and share a tokenizer; a bound that cuts
    the text trains another."""
    data = _corpus(tmp_path, HEAD + TAIL)
    with caplog.at_level(logging.INFO, logger="xfmr"):
        _prepare(tmp_path, data, "byte_bpe", "a", train_sample_mb=256)
        _prepare(tmp_path, data, "byte_bpe", "b", train_sample_mb=1)
        _prepare(tmp_path, data, "byte_bpe", "c", train_sample_mb=0.001)
    outcomes = [
        r.getMessage().rsplit("(", 1)[-1] for r in caplog.records if "vocabulary" in r.getMessage()
    ]
    assert outcomes == ["trained)", "cached)", "trained)"]


def test_a_bound_that_is_not_positive_is_refused(tmp_path: Path) -> None:
    data = _corpus(tmp_path, HEAD)
    with pytest.raises(
        ValueError, match=r"tokenizer.train_sample_mb=0 is not valid: use a number > 0"
    ):
        _prepare(tmp_path, data, "char", "run", train_sample_mb=0)


def test_the_sample_respects_the_validation_split(tmp_path: Path) -> None:
    """The head never reaches into the validation tail, however large the bound."""
    data = _corpus(tmp_path, HEAD + TAIL)
    data.val_fraction = 0.5
    assert "".join(training_text(data, 10**9)) == data.split_text()[0]
    assert "".join(training_text(data, 100)) == HEAD[:100]


def test_a_missing_corpus_is_a_user_error(tmp_path: Path) -> None:
    data = TextCorpusDataModule(path=str(tmp_path / "nope.txt"))
    with pytest.raises(UserError, match="data.path="):
        survey(data, 1000)


MEASURE = textwrap.dedent(
    """
    import sys
    from xfmr.data.text import TextCorpusDataModule
    from xfmr.parts.tokenizer import prepare_tokenizer
    from xfmr.text.tokenizers import TokenizerSpec

    def kib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])

    path, mode, cache = sys.argv[1:4]
    SETTINGS = {"kind": "byte_bpe", "special_tokens": ["<|endoftext|>"], "unk_token": None}
    data = TextCorpusDataModule(path=path, val_fraction=0.01)
    # Start the peak afresh here (Linux: 5 -> clear_refs resets VmHWM to the current RSS), so a
    # peak from importing torch cannot hide what follows.
    open("/proc/self/clear_refs", "w").write("5")
    before = kib("VmHWM")
    if mode == "sample":
        spec = TokenizerSpec.read({**SETTINGS, "vocab_size": 512, "train_sample_mb": 4})
        prepare_tokenizer(
            spec, data, __import__("pathlib").Path(cache), cache_dir=cache, objective="clm"
        )
    else:
        data.split_text()  # the whole training text as one string, as before
    print((kib("VmHWM") - before) // 1024)  # MiB
    """
)


def _measure_in_a_process(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    """MEASURE in a process of its own (`run_python_script`: forked from the server that has
    torch imported, where a fork behaves as a fresh start). MEASURE starts its peak afresh
    before it reads, so how the process started does not count."""
    script = tmp_path / "measure.py"
    script.write_text(MEASURE)
    return run_python_script(script, args, cwd=tmp_path, timeout=300)


@pytest.mark.slow  # a 50 MB file, read in two processes: about 10 s
@pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /proc/self/status")
def test_a_big_corpus_is_sampled_without_reading_it_into_memory(tmp_path: Path) -> None:
    words = [f"w{i}x{i * 7 % 13}" for i in range(2000)]
    block = " ".join(words[(i * 31) % 2000] for i in range(100_000)) + "\n"  # ~0.8 MB
    path = tmp_path / "big.txt"
    with path.open("w", encoding="utf-8") as f:
        for _ in range(66):
            f.write(block)
    assert path.stat().st_size > 50_000_000

    def grows(mode: str) -> int:
        cache = tmp_path / mode
        cache.mkdir()
        done = _measure_in_a_process(tmp_path, [str(path), mode, str(cache)])
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    reading, sampling = grows("read"), grows("sample")
    assert reading > 50  # the whole text as a string: at least the file's size
    # Sampling costs the tokenizer's training (~35 MiB here), less than the file's own size.
    assert sampling < min(reading / 2, 50), (sampling, reading)
