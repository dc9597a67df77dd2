"""Char and byte-level BPE tokenizers: exact round trips, vocab size, unk, caching, spec checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT
from xfmr.text.tokenizers import (
    TextTokenizer,
    TokenizerSpec,
    fit_or_load,
    text_fingerprint,
    train_tokenizer,
)

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


# --- bpe, wordpiece, unigram, pretrained ---------------------------------------------------

WORDS = (
    "the cat sat on the mat, and the dog sat on the log.\n"
    "a cat and a dog: the best of friends!\n"
    "the quick brown fox jumps over the lazy dog (twice).\n"
)
NEW_SPECS = {
    "bpe": TokenizerSpec(kind="bpe", vocab_size=200),
    "wordpiece": TokenizerSpec(kind="wordpiece", vocab_size=200),
    "unigram": TokenizerSpec(kind="unigram", vocab_size=120),
}


@pytest.mark.parametrize("kind", sorted(NEW_SPECS))
def test_new_kinds_round_trip_simple_text(kind: str) -> None:
    """decode(encode(x)) == x for lowercase, single-spaced text made of seen characters."""
    tokenizer = train_tokenizer(NEW_SPECS[kind], iter([WORDS * 3]))
    for text in ("the cat sat on the log.", "a dog, a fox and the best mat!", "the lazy cat"):
        ids = tokenizer.encode(text)
        assert ids and tokenizer.decode(ids) == text
    assert tokenizer.vocab_size <= NEW_SPECS[kind].vocab_size


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_metaspace_kinds_keep_newlines_and_double_spaces(kind: str) -> None:
    """bpe and unigram do no normalisation: newlines, tabs and runs of spaces survive."""
    tokenizer = train_tokenizer(NEW_SPECS[kind], iter([WORDS * 3 + "\tx  y"]))
    text = "the cat\n\tsat  on the mat.\n"
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_bpe_merges_frequent_words() -> None:
    """BPE learns merges: a frequent word is one token, not its characters."""
    tokenizer = train_tokenizer(NEW_SPECS["bpe"], iter([WORDS * 3]))
    assert len(tokenizer.encode("the")) == 1
    assert tokenizer.tokenizer.encode("the cat", add_special_tokens=False).tokens == [
        "\u2581the",
        "\u2581cat",
    ]


def test_wordpiece_splits_rare_long_word_into_hash_pieces_and_lowercases() -> None:
    """An unseen long word becomes a first piece plus `##` continuations; text is lowercased."""
    tokenizer = train_tokenizer(NEW_SPECS["wordpiece"], iter([WORDS * 3]))
    pieces = tokenizer.tokenizer.encode("Thecatdogfoxmat", add_special_tokens=False).tokens
    assert len(pieces) > 1
    assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
    assert "[UNK]" not in pieces
    assert tokenizer.decode(tokenizer.encode("The CAT Sat")) == "the cat sat"
    assert tokenizer.decode(tokenizer.encode("Thecatdogfoxmat")) == "thecatdogfoxmat"


def test_wordpiece_lowercase_false_keeps_case() -> None:
    """lowercase=false keeps capitals (and they are different tokens)."""
    spec = TokenizerSpec(kind="wordpiece", vocab_size=200, lowercase=False)
    tokenizer = train_tokenizer(spec, iter([WORDS * 3 + "The Cat"]))
    assert tokenizer.decode(tokenizer.encode("The Cat sat")) == "The Cat sat"
    assert tokenizer.encode("The") != tokenizer.encode("the")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
        ("unigram", ["<pad>", "</s>", "<unk>"]),
        ("bpe", ["<unk>"]),
    ],
)
def test_default_special_tokens_get_first_ids_in_order(kind: str, expected: list[str]) -> None:
    """A kind's default specials take ids 0.. in the order listed, and count as special."""
    spec = NEW_SPECS[kind]
    assert list(spec.special_tokens) == expected
    tokenizer = train_tokenizer(spec, iter([WORDS]))
    assert [tokenizer.token_to_id(t) for t in expected] == list(range(len(expected)))
    assert tokenizer.special_ids() == set(range(len(expected)))


@pytest.mark.parametrize("kind", sorted(NEW_SPECS))
def test_objective_specials_follow_listed_specials(kind: str) -> None:
    """Specials appended by an objective (sentinels, [MASK]) come right after, in order."""
    base = list(NEW_SPECS[kind].special_tokens)
    extra = ["<extra_id_0>", "<extra_id_1>", "[MASK]" if kind != "wordpiece" else "<s>"]
    spec = TokenizerSpec(kind=kind, vocab_size=200, special_tokens=(*base, *extra))
    tokenizer = train_tokenizer(spec, iter([WORDS]))
    assert [tokenizer.token_to_id(t) for t in base + extra] == list(range(len(base + extra)))
    ids = tokenizer.encode("the cat <extra_id_1> sat")
    assert tokenizer.token_to_id("<extra_id_1>") in ids


@pytest.mark.parametrize("kind", ["wordpiece", "unigram", "bpe"])
def test_new_kinds_map_unseen_characters_to_unk(kind: str) -> None:
    """A character never seen in training encodes to the unk id."""
    spec = NEW_SPECS[kind]
    tokenizer = train_tokenizer(spec, iter([WORDS]))
    assert "Z" not in WORDS
    assert tokenizer.token_to_id(spec.unk_token) in tokenizer.encode("the Z€")


def _saved(tmp_path: Path, specials: tuple[str, ...]) -> Path:
    spec = TokenizerSpec(kind="wordpiece", vocab_size=200, special_tokens=specials)
    path = tmp_path / "tokenizer.json"
    train_tokenizer(spec, iter([WORDS])).save(path)
    return path


def test_pretrained_loads_saved_tokenizer_without_cache(tmp_path: Path) -> None:
    """kind=pretrained loads the file as saved (same vocab and ids) and writes no cache."""
    path = _saved(tmp_path, ("[PAD]", "[UNK]", "[MASK]"))
    saved = TextTokenizer.load(path)
    spec = TokenizerSpec(kind="pretrained", path=str(path), special_tokens=("[MASK]",))
    cache = tmp_path / "cache"
    tokenizer, cached = fit_or_load(spec, iter([]), data_fingerprint="x", cache_dir=cache)
    assert cached is False and not cache.exists()
    assert tokenizer.tokenizer.get_vocab() == saved.tokenizer.get_vocab()
    assert tokenizer.encode("the cat sat") == saved.encode("the cat sat")
    assert train_tokenizer(spec, iter([])).tokenizer.get_vocab() == saved.tokenizer.get_vocab()


def test_pretrained_refuses_missing_required_specials(tmp_path: Path) -> None:
    """A loaded tokenizer lacking a required special (e.g. an objective's) is a ValueError
    naming the missing tokens and the file."""
    path = _saved(tmp_path, ("[PAD]", "[UNK]"))
    spec = TokenizerSpec(
        kind="pretrained", path=str(path), special_tokens=("[PAD]", "<extra_id_0>", "[MASK]")
    )
    with pytest.raises(ValueError, match="tokenizer.json") as info:
        fit_or_load(spec, iter([]), data_fingerprint="x", cache_dir=tmp_path)
    message = str(info.value)
    assert "<extra_id_0>" in message and "[MASK]" in message and "'[PAD]'" not in message


def test_pretrained_missing_file_is_a_value_error(tmp_path: Path) -> None:
    """A path that is not a file is reported with the key and the path."""
    spec = TokenizerSpec(kind="pretrained", path=str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="tokenizer.path=.*nope.json"):
        fit_or_load(spec, iter([]), data_fingerprint="x", cache_dir=tmp_path)


@pytest.mark.parametrize("kind", ["bpe", "wordpiece", "unigram"])
def test_spec_requires_vocab_size_for_trained_subword_kinds(kind: str) -> None:
    """bpe, wordpiece and unigram need a vocab_size."""
    with pytest.raises(ValueError, match=f"vocab_size must be set for kind={kind}"):
        TokenizerSpec(kind=kind)
    assert TokenizerSpec(kind=kind, vocab_size=100).vocab_size == 100


def test_spec_path_required_for_pretrained_and_rejected_elsewhere() -> None:
    """`path` is required by kind=pretrained and refused (naming the key) by other kinds."""
    with pytest.raises(ValueError, match="tokenizer.path must be set for kind=pretrained"):
        TokenizerSpec(kind="pretrained")
    for kind, size in [("char", None), ("byte_bpe", 300), ("bpe", 100), ("wordpiece", 100)]:
        with pytest.raises(ValueError, match="tokenizer.path="):
            TokenizerSpec(kind=kind, vocab_size=size, path="tokenizer.json")
    with pytest.raises(ValueError, match="tokenizer.vocab_size"):
        TokenizerSpec(kind="pretrained", path="tokenizer.json", vocab_size=100)
    spec = TokenizerSpec(kind="pretrained", path="tokenizer.json")
    assert (spec.special_tokens, spec.unk_token) == ((), None)


def test_spec_checks_unk_and_lowercase() -> None:
    """wordpiece/unigram need an unk token among the specials; lowercase is wordpiece-only."""
    with pytest.raises(ValueError, match="unk_token must be set for kind=unigram"):
        TokenizerSpec(kind="unigram", vocab_size=100, unk_token=None)
    with pytest.raises(ValueError, match="unk_token='<unk>'"):
        TokenizerSpec(kind="wordpiece", vocab_size=100, unk_token="<unk>")
    with pytest.raises(ValueError, match="lowercase"):
        TokenizerSpec(kind="bpe", vocab_size=100, lowercase=False)
    assert TokenizerSpec(kind="wordpiece", vocab_size=100).unk_token == "[UNK]"


def test_digest_changes_with_every_field_and_old_kinds_keep_theirs() -> None:
    """Any field change changes the cache key; char/byte_bpe keys are those of the old spec."""
    base = TokenizerSpec(kind="wordpiece", vocab_size=100)
    variants = [
        TokenizerSpec(kind="wordpiece", vocab_size=101),
        TokenizerSpec(kind="wordpiece", vocab_size=100, lowercase=False),
        TokenizerSpec(kind="wordpiece", vocab_size=100, special_tokens=("[UNK]", "[PAD]")),
        TokenizerSpec(
            kind="wordpiece", vocab_size=100, special_tokens=("[UNK]", "<u>"), unk_token="<u>"
        ),
        TokenizerSpec(kind="bpe", vocab_size=100),
        TokenizerSpec(kind="unigram", vocab_size=100),
    ]
    digests = {base.digest(), *(v.digest() for v in variants)}
    assert len(digests) == len(variants) + 1
    a = TokenizerSpec(kind="pretrained", path="a/tokenizer.json")
    assert a.digest() != TokenizerSpec(kind="pretrained", path="b/tokenizer.json").digest()
    import hashlib
    import json

    old = {"kind": "char", "vocab_size": None, "special_tokens": ["<unk>"], "unk_token": "<unk>"}
    expected = hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    assert TokenizerSpec(kind="char").digest() == expected


def test_shipped_yaml_keys_are_spec_fields() -> None:
    """Every conf/tokenizer/*.yaml builds a TokenizerSpec (pretrained once given a path)."""
    import yaml

    conf = ROOT / "conf" / "tokenizer"
    names = sorted(p.stem for p in conf.glob("*.yaml"))
    assert {"bpe", "wordpiece", "unigram", "pretrained", "char", "byte_bpe"} <= set(names)
    for name in names:
        settings = yaml.safe_load((conf / f"{name}.yaml").read_text())
        assert settings["kind"] == name
        if name == "pretrained":
            assert settings["path"] is None
            settings["path"] = "tokenizer.json"
        spec = TokenizerSpec(**settings)
        if spec.unk_token is not None:
            assert spec.unk_token in spec.special_tokens
