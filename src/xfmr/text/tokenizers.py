"""Tokenizers from the HF `tokenizers` library: trained on the training split, cached, saved.

A tokenizer is cached under a hash of (training data fingerprint, settings), so the same data
and settings reuse it; every run directory gets its own copy as `tokenizer.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

KINDS = ("char", "byte_bpe")


@dataclass(frozen=True)
class TokenizerSpec:
    """What to train. `vocab_size` is a ceiling for BPE; char takes every character it sees."""

    kind: str = "char"
    vocab_size: int | None = None
    special_tokens: tuple[str, ...] = field(default_factory=lambda: ("<unk>",))
    unk_token: str | None = "<unk>"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"tokenizer.kind={self.kind!r} is not one of {list(KINDS)}")
        if self.kind == "byte_bpe" and not self.vocab_size:
            raise ValueError("tokenizer.vocab_size must be set for kind=byte_bpe (e.g. 1024)")
        object.__setattr__(self, "special_tokens", tuple(self.special_tokens))
        if self.unk_token is not None and self.unk_token not in self.special_tokens:
            raise ValueError(
                f"tokenizer.unk_token={self.unk_token!r} must be one of tokenizer.special_tokens={list(self.special_tokens)}"
            )

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


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

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def special_ids(self) -> set[int]:
        return {i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def save(self, path: str | Path) -> None:
        self.tokenizer.save(str(path))

    @classmethod
    def load(cls, path: str | Path) -> TextTokenizer:
        return cls(Tokenizer.from_file(str(path)))


def train_tokenizer(spec: TokenizerSpec, texts: Iterator[str]) -> TextTokenizer:
    if spec.kind == "char":
        tok = Tokenizer(models.WordLevel(unk_token=spec.unk_token))
        # Every character, newlines included, is its own token.
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
        trainer = trainers.WordLevelTrainer(
            vocab_size=spec.vocab_size or 1_000_000,
            min_frequency=1,
            special_tokens=list(spec.special_tokens),
        )
    else:  # byte_bpe: GPT-2's byte-level BPE (Radford et al. 2019)
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=spec.vocab_size,
            special_tokens=list(spec.special_tokens),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    tok.train_from_iterator(texts, trainer=trainer)
    return TextTokenizer(tok)


def fit_or_load(
    spec: TokenizerSpec,
    texts: Iterator[str],
    *,
    data_fingerprint: str,
    cache_dir: str | Path,
) -> tuple[TextTokenizer, bool]:
    """Train on `texts` unless a tokenizer for the same data and settings is cached.

    Returns the tokenizer and whether it came from the cache.
    """
    key = hashlib.sha256(f"{data_fingerprint}:{spec.digest()}".encode()).hexdigest()[:20]
    path = Path(cache_dir) / "tokenizers" / f"{spec.kind}-{key}.json"
    if path.is_file():
        return TextTokenizer.load(path), True
    tokenizer = train_tokenizer(spec, texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(tmp)
    os.replace(tmp, path)  # atomic: concurrent jobs never read half a file
    return tokenizer, False


def save_copy(tokenizer: TextTokenizer, run_dir: str | Path) -> Path:
    path = Path(run_dir) / "tokenizer.json"
    tokenizer.save(path)
    return path


def text_fingerprint(texts: Iterable[str]) -> str:
    """Content hash of the training text: the tokenizer cache key's data half."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
    return digest.hexdigest()[:20]
