"""Tokenizers from the HF `tokenizers` library: trained on the training split, cached, saved.

A tokenizer is cached under a hash of (training data fingerprint, settings), so the same data
and settings reuse it; every run directory gets its own copy as `tokenizer.json`.
kind=pretrained instead loads an existing tokenizer.json (no training, no cache).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.trainers import Trainer

from xfmr.errors import UserError
from xfmr.files import atomic_path
from xfmr.keys import unknown_key
from xfmr.ranges import POSITIVE, STEPS, NumberTable, check_numbers

KINDS = ("char", "byte_bpe", "bpe", "wordpiece", "unigram", "pretrained")

# `unk_token` left at DEFAULT takes the kind's own unknown token (below); None means "no unk".
DEFAULT = "default"
# Per kind: (special tokens when none are given, unk token when left at DEFAULT).
_KIND_DEFAULTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "char": (("<unk>",), "<unk>"),
    "byte_bpe": (("<unk>",), "<unk>"),
    "bpe": (("<unk>",), "<unk>"),
    "wordpiece": (("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), "[UNK]"),
    "unigram": (("<pad>", "</s>", "<unk>"), "<unk>"),
    "pretrained": ((), None),
}
# Fields added after the first release: left out of the digest while at their default, so the
# cache keys of existing char/byte_bpe tokenizers stay the same (any change still changes it).
_LATER_FIELDS = {"lowercase": True, "path": None}
# How much text to train on: the fingerprint of the text actually read stands for it.
_SAMPLE_FIELDS = {"train_sample_mb"}
METASPACE = "\u2581"  # SentencePiece's "▁" word-boundary marker
BYTE_LEVEL_SPACE = "\u0120"  # GPT-2's byte-level "Ġ": a space, so a word start
# Kinds whose pieces mark words (WordPiece "##" continuations, "▁" or "Ġ" word starts), as
# whole-word masking needs; a pretrained tokenizer.json is checked when it is loaded.
WORD_MARKING_KINDS = ("wordpiece", "bpe", "unigram", "byte_bpe")
NUMBERS: NumberTable = {
    "vocab_size": ((STEPS,), "the kind's own size"),
    "train_sample_mb": ((POSITIVE,), None),
}


@dataclass(frozen=True)
class TokenizerSpec:
    """What to train (or, for kind=pretrained, which tokenizer.json to load).

    - `char`: one token per character seen; `vocab_size` is an optional ceiling.
    - `byte_bpe`: GPT-2's byte-level BPE; no unknowns.
    - `bpe`: classic character BPE (Sennrich et al. 2016) over Metaspace words split at
      punctuation and at non-space whitespace; one vocabulary for everything it is trained on
      (source and target share it, as in the original Transformer).
    - `wordpiece`: BERT's uncased (or cased, `lowercase: false`) WordPiece with `##` pieces.
    - `unigram`: T5/SentencePiece's unigram language model over Metaspace words.
    - `pretrained`: an existing tokenizer.json at `path`; nothing is trained.

    Special tokens get the first ids, in the order listed. `vocab_size` is a ceiling and is
    required for bpe, byte_bpe, wordpiece and unigram. `train_sample_mb` bounds the text trained
    on: the head of the training split (see `xfmr.text.sample`).
    """

    kind: str = "char"
    vocab_size: int | None = None
    special_tokens: tuple[str, ...] | None = None  # None: the kind's defaults
    unk_token: str | None = DEFAULT
    lowercase: bool = True  # wordpiece only
    path: str | None = None  # pretrained only
    # Megabytes (10^6 bytes) of the training split's head the tokenizer trains on.
    train_sample_mb: float = 256.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"tokenizer.kind={self.kind!r} is not one of {list(KINDS)}")
        default_specials, default_unk = _KIND_DEFAULTS[self.kind]
        specials = default_specials if self.special_tokens is None else self.special_tokens
        if isinstance(specials, str):
            raise ValueError(f"tokenizer.special_tokens={specials!r} must be a list of tokens")
        object.__setattr__(self, "special_tokens", tuple(specials))
        if self.unk_token == DEFAULT:
            object.__setattr__(self, "unk_token", default_unk)
        if self.kind in ("byte_bpe", "bpe", "wordpiece", "unigram") and not self.vocab_size:
            raise ValueError(
                f"tokenizer.vocab_size must be set for kind={self.kind} "
                f"(e.g. {1024 if self.kind == 'byte_bpe' else 8000})"
            )
        if self.vocab_size is not None and self.vocab_size <= 0:
            raise ValueError(f"tokenizer.vocab_size={self.vocab_size} must be positive")
        if not self.train_sample_mb > 0:
            raise ValueError(
                f"tokenizer.train_sample_mb={self.train_sample_mb} must be a positive number of "
                "megabytes (e.g. 256)"
            )
        if self.kind in ("wordpiece", "unigram") and self.unk_token is None:
            raise ValueError(f"tokenizer.unk_token must be set for kind={self.kind}")
        if self.kind == "pretrained":
            if not self.path:
                raise ValueError(
                    "tokenizer.path must be set for kind=pretrained (a tokenizer.json file)"
                )
            if self.vocab_size is not None:
                raise ValueError(
                    "tokenizer.vocab_size must be null for kind=pretrained: the file decides it"
                )
        elif self.path is not None:
            raise ValueError(
                f"tokenizer.path={self.path!r} is only for kind=pretrained, not {self.kind}"
            )
        if not self.lowercase and self.kind != "wordpiece":
            raise ValueError(
                f"tokenizer.lowercase=false is only for kind=wordpiece, not {self.kind}"
            )
        if self.unk_token is not None and self.unk_token not in self.special_tokens:
            raise ValueError(
                f"tokenizer.unk_token={self.unk_token!r} must be one of tokenizer.special_tokens={list(self.special_tokens)}"
            )

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> TokenizerSpec:
        """The `tokenizer` section as composed: an unknown key is refused with the nearest
        ones, and with kind=pretrained the tokenizer.json must load (read before training
        starts, so a wrong path fails in a second); each mistake is a ValueError naming it."""
        known = [f.name for f in fields(cls)]
        for name in values:
            if name not in known:
                raise ValueError(unknown_key("tokenizer", name, known))
        try:
            check_numbers("tokenizer", values, NUMBERS)
        except UserError as e:
            raise ValueError(str(e)) from None
        given = dict(values)
        if isinstance(given.get("special_tokens"), list | tuple):
            given["special_tokens"] = tuple(given["special_tokens"])
        try:
            spec = cls(**given)
        except TypeError as e:  # a value of the wrong type for a comparison in the checks
            raise ValueError(f"tokenizer: {e}") from None
        if spec.kind == "pretrained":
            read_tokenizer_file(spec.path)
        return spec

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "special_tokens": list(self.special_tokens)}

    def digest(self) -> str:
        settings = {
            k: v
            for k, v in asdict(self).items()
            if (k not in _LATER_FIELDS or v != _LATER_FIELDS[k]) and k not in _SAMPLE_FIELDS
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class TextTokenizer:
    """A thin, picklable view of an HF `Tokenizer` with the calls xfmr needs."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def encode_batch_with_offsets(
        self, texts: list[str]
    ) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """Per text: (ids, offsets), token i covering text[offsets[i][0]:offsets[i][1]] of the
        original text (before normalisation such as lowercasing)."""
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [(e.ids, [tuple(o) for o in e.offsets]) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def special_ids(self) -> set[int]:
        return {i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def pieces(self) -> list[str]:
        """Every id's piece (token string), in id order."""
        pieces = [""] * self.vocab_size
        for piece, i in self.tokenizer.get_vocab(with_added_tokens=True).items():
            pieces[i] = piece
        return pieces

    def word_marker(self) -> tuple[str, bool] | None:
        """How pieces mark words: (marker, True) when a piece beginning with `marker` starts a
        word (Metaspace "▁": bpe, unigram; byte-level "Ġ": byte_bpe), (marker, False) when it
        continues the word before it (WordPiece "##"); None when pieces mark no words (char)."""
        config = json.loads(self.tokenizer.to_str())
        model = config.get("model") or {}
        if model.get("type") == "WordPiece":
            return model.get("continuing_subword_prefix") or "##", False
        steps = [config.get("pre_tokenizer") or {}]
        steps += steps[0].get("pretokenizers") or []  # inside a Sequence
        for step in steps:
            if step.get("type") == "Metaspace":
                return step.get("replacement") or METASPACE, True
            if step.get("type") == "ByteLevel":
                return BYTE_LEVEL_SPACE, True
        return None

    def save(self, path: str | Path) -> None:
        """Written whole or not at all (`xfmr.files.atomic_path`)."""
        with atomic_path(path) as temporary:
            self.tokenizer.save(str(temporary))

    @classmethod
    def load(cls, path: str | Path) -> TextTokenizer:
        return cls(Tokenizer.from_file(str(path)))


def train_tokenizer(spec: TokenizerSpec, texts: Iterator[str]) -> TextTokenizer:
    """Train a `spec.kind` tokenizer on `texts` (kind=pretrained: load `spec.path` instead).

    Round trips, decode(encode(x)):
    - char, byte_bpe: exact for any text (char: for characters seen in training).
    - bpe, unigram: no normalisation; exact for seen characters, except that one leading space
      of the whole text is dropped (the Metaspace prefix marker and a real space coincide).
    - wordpiece: BERT normalisation — lowercased and accents stripped (unless
      `lowercase: false`), control characters removed, every run of whitespace (newlines and
      tabs included) becomes one space and spaces before punctuation are removed on decoding.
    """
    if spec.kind == "pretrained":
        return load_pretrained(spec)
    tok, trainer = _UNTRAINED[spec.kind](spec, list(spec.special_tokens))
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok)


def _char_tokenizer(spec: TokenizerSpec, specials: list[str]) -> tuple[Tokenizer, Trainer]:
    """Every character, newlines included, is its own token."""
    tok = Tokenizer(models.WordLevel(unk_token=spec.unk_token))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(
        vocab_size=spec.vocab_size or 1_000_000,
        min_frequency=1,
        special_tokens=specials,
    )
    return tok, trainer


def _byte_bpe_tokenizer(spec: TokenizerSpec, specials: list[str]) -> tuple[Tokenizer, Trainer]:
    """GPT-2's byte-level BPE (Radford et al. 2019)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    return tok, trainer


def _bpe_tokenizer(spec: TokenizerSpec, specials: list[str]) -> tuple[Tokenizer, Trainer]:
    """Character BPE, one vocabulary shared by source and target (Vaswani et al.)."""
    tok = Tokenizer(models.BPE(unk_token=spec.unk_token))
    # Spaces become "▁" word starts; punctuation and other whitespace (newlines, tabs) are
    # pieces of their own, so merges never cross them and decoding restores them verbatim.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always"),
            pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size, special_tokens=specials, show_progress=False
    )
    return tok, trainer


def _wordpiece_tokenizer(spec: TokenizerSpec, specials: list[str]) -> tuple[Tokenizer, Trainer]:
    """BERT's WordPiece (Devlin et al. 2019)."""
    tok = Tokenizer(models.WordPiece(unk_token=spec.unk_token, continuing_subword_prefix="##"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=spec.lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=specials,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    return tok, trainer


def _unigram_tokenizer(spec: TokenizerSpec, specials: list[str]) -> tuple[Tokenizer, Trainer]:
    """T5's SentencePiece unigram LM (Kudo 2018, Raffel et al. 2020)."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=specials,
        unk_token=spec.unk_token,
        show_progress=False,
    )
    return tok, trainer


# Per trained kind: its untrained tokenizer and the trainer that fits it to the text.
_UNTRAINED = {
    "char": _char_tokenizer,
    "byte_bpe": _byte_bpe_tokenizer,
    "bpe": _bpe_tokenizer,
    "wordpiece": _wordpiece_tokenizer,
    "unigram": _unigram_tokenizer,
}


def read_tokenizer_file(path: str | Path) -> TextTokenizer:
    """The tokenizer.json at `path` (tokenizer.path); a missing or unreadable file is a
    ValueError naming it."""
    file = Path(str(path)).expanduser()
    if not file.is_file():
        raise ValueError(f"tokenizer.path={str(file)!r} is not a file (expected a tokenizer.json)")
    try:
        return TextTokenizer.load(file)
    except Exception as e:  # the library raises a bare Exception, whatever the fault
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"tokenizer.path={str(file)!r} is not a tokenizer.json the tokenizers library can "
            f"read ({reason}): give a file saved by Tokenizer.save, e.g. a run's tokenizer.json"
        ) from None


def load_pretrained(spec: TokenizerSpec) -> TextTokenizer:
    """The tokenizer.json at `spec.path`, which must know every token in `spec.special_tokens`
    (the configured ones plus those the objective needs)."""
    path = Path(str(spec.path)).expanduser()
    tokenizer = read_tokenizer_file(path)
    missing = [t for t in spec.special_tokens if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(
            f"tokenizer.path={str(path)!r} lacks the special tokens {missing} that the "
            "tokenizer settings or the objective need; pick a tokenizer that has them"
        )
    return tokenizer


def fit_or_load(
    spec: TokenizerSpec,
    texts: Iterator[str],
    *,
    data_fingerprint: str,
    cache_dir: str | Path,
) -> tuple[TextTokenizer, bool]:
    """Train on `texts` unless a tokenizer for the same data and settings is cached.

    Returns the tokenizer and whether it came from the cache. kind=pretrained loads
    `spec.path` (checking its special tokens), never touches the cache and returns False.
    """
    if spec.kind == "pretrained":
        return load_pretrained(spec), False
    key = hashlib.sha256(f"{data_fingerprint}:{spec.digest()}".encode()).hexdigest()[:20]
    path = Path(cache_dir) / "tokenizers" / f"{spec.kind}-{key}.json"
    if path.is_file():
        return TextTokenizer.load(path), True
    tokenizer = train_tokenizer(spec, texts)
    tokenizer.save(path)  # atomic: concurrent jobs never read half a file
    return tokenizer, False


def text_fingerprint(texts: Iterable[str]) -> str:
    """Content hash of the training text: the tokenizer cache key's data half."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
    return digest.hexdigest()[:20]
