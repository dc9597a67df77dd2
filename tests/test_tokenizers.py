"""Char and byte-level BPE tokenizers: exact round trips, vocab size, unk, caching, spec checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from xfmr.text.tokenizers import TokenizerSpec, fit_or_load, text_fingerprint, train_tokenizer

TEXT = (
    "Café crème brûlée, déjà vu.\n"
    "\tindented  with  double  spaces\n"
    "naïve résumé — über Ærø\n"
    "\n"
    "  trailing\t\ttabs \n"
    "last line without newline"
)
SPECS = {
    "char": TokenizerSpec(kind="char"),
    "byte_bpe": TokenizerSpec(kind="byte_bpe", vocab_size=300),
}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_round_trip_is_exact(kind: str) -> None:
    """decode(encode(text)) == text for in-vocab text: unicode, tabs, newlines, double spaces."""
    tokenizer = train_tokenizer(SPECS[kind], iter([TEXT]))
    ids = tokenizer.encode(TEXT)
    assert ids and tokenizer.decode(ids) == TEXT
    fragment = "déjà  vu\n\t"
    assert tokenizer.decode(tokenizer.encode(fragment)) == fragment


def test_char_tokens_are_single_characters() -> None:
    """The char tokenizer emits exactly one id per character."""
    tokenizer = train_tokenizer(SPECS["char"], iter([TEXT]))
    assert len(tokenizer.encode(TEXT)) == len(TEXT)


def test_char_vocab_is_distinct_characters_plus_specials() -> None:
    """Char vocab size = number of distinct training characters + special tokens."""
    spec = TokenizerSpec(kind="char", special_tokens=("<unk>", "<pad>"))
    tokenizer = train_tokenizer(spec, iter([TEXT]))
    assert tokenizer.vocab_size == len(set(TEXT)) + 2


def test_char_unseen_character_maps_to_unk() -> None:
    """A character absent from the training text encodes to the unk id."""
    tokenizer = train_tokenizer(SPECS["char"], iter([TEXT]))
    unk = tokenizer.token_to_id("<unk>")
    assert unk is not None
    assert "Z" not in TEXT and "€" not in TEXT
    assert tokenizer.encode("Z€") == [unk, unk]
    assert unk not in tokenizer.encode(TEXT)


def test_byte_bpe_round_trips_unseen_characters() -> None:
    """Byte-level BPE has no unknowns: text with unseen characters still round-trips."""
    tokenizer = train_tokenizer(SPECS["byte_bpe"], iter([TEXT]))
    unseen = "Zebra € ∑ 日本"
    assert tokenizer.decode(tokenizer.encode(unseen)) == unseen
    assert tokenizer.vocab_size <= 300


def _fit(spec: TokenizerSpec, text: str | None, cache_dir: Path):
    """fit_or_load on `text`; text=None passes no training data (only a cache hit can succeed)."""
    fingerprint = text_fingerprint([text if text is not None else TEXT])
    texts = iter([text] if text is not None else [])
    return fit_or_load(spec, texts, data_fingerprint=fingerprint, cache_dir=cache_dir)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_fit_or_load_reuses_cache(kind: str, tmp_path: Path) -> None:
    """A second call with the same data and spec loads the cached tokenizer with the same vocab."""
    first, cached_first = _fit(SPECS[kind], TEXT, tmp_path)
    second, cached_second = _fit(SPECS[kind], None, tmp_path)  # no data: must come from cache
    assert (cached_first, cached_second) == (False, True)
    assert second.tokenizer.get_vocab() == first.tokenizer.get_vocab()
    assert second.encode(TEXT) == first.encode(TEXT)
    assert len(list((tmp_path / "tokenizers").glob("*.json"))) == 1


def test_fit_or_load_retrains_for_different_spec(tmp_path: Path) -> None:
    """Changing the spec misses the cache."""
    _fit(SPECS["char"], TEXT, tmp_path)
    other = TokenizerSpec(kind="char", special_tokens=("<unk>", "<pad>"))
    tokenizer, cached = _fit(other, TEXT, tmp_path)
    assert cached is False
    assert tokenizer.token_to_id("<pad>") is not None
    _, cached_bpe = _fit(SPECS["byte_bpe"], TEXT, tmp_path)
    assert cached_bpe is False


def test_fit_or_load_retrains_for_different_text(tmp_path: Path) -> None:
    """Changing the training text misses the cache, and the new vocab reflects the new text."""
    _fit(SPECS["char"], TEXT, tmp_path)
    tokenizer, cached = _fit(SPECS["char"], TEXT + "XYZ", tmp_path)
    assert cached is False
    assert tokenizer.token_to_id("X") is not None


def test_spec_rejects_unknown_kind() -> None:
    """An unknown tokenizer kind is a ValueError listing the valid kinds."""
    with pytest.raises(ValueError, match="wordpeace") as info:
        TokenizerSpec(kind="wordpeace")
    assert "char" in str(info.value) and "byte_bpe" in str(info.value)


def test_spec_rejects_byte_bpe_without_vocab_size() -> None:
    """byte_bpe needs a vocab_size."""
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizerSpec(kind="byte_bpe")
    assert TokenizerSpec(kind="byte_bpe", vocab_size=300).vocab_size == 300
