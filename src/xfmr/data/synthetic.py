"""A small synthetic language generated in code, so the default experiment needs no download.

Sentences follow a toy grammar with number agreement between subject and verb (also across a
relative clause) and "a"/"an" before vowels, so a model has to learn spelling, word order and a
long-range dependency; its loss falls well below the unigram entropy within a few hundred steps.
"""

from __future__ import annotations

import random

from xfmr.data.text import TextCorpusDataModule
from xfmr.errors import UserError

_NOUNS = ["cat", "dog", "bird", "owl", "fox", "horse", "eagle", "tiger", "otter"]
_ADJECTIVES = ["small", "old", "quick", "lazy", "red", "angry", "quiet", "happy", "brave", "odd"]
_VERBS = ["see", "chase", "follow", "like", "watch", "help", "fear", "know"]
_PLACES = ["in the park", "near the river", "under the tree", "at night", "on the hill"]


def _noun_phrase(rng: random.Random, plural: bool) -> str:
    words = []
    if rng.random() < 0.5:
        words.append(rng.choice(_ADJECTIVES))
    noun = rng.choice(_NOUNS)
    words.append(noun + ("s" if plural and not noun.endswith("s") else ""))
    if plural:
        det = rng.choice(["the", "some", "two"])
    else:
        det = rng.choice(["the", "a"])
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
    return " ".join([det, *words])


def _verb(rng: random.Random, plural: bool) -> str:
    return _inflect(rng.choice(_VERBS), plural)


def _inflect(verb: str, plural: bool) -> str:
    return verb if plural else verb + ("es" if verb.endswith(("ch", "sh")) else "s")


def sentence(rng: random.Random) -> str:
    plural = rng.random() < 0.5
    subject = _noun_phrase(rng, plural)
    if rng.random() < 0.3:  # a relative clause between subject and verb: agreement at a distance
        inner_plural = rng.random() < 0.5
        subject += f" that {_verb(rng, plural)} {_noun_phrase(rng, inner_plural)}"
    words = [subject, _verb(rng, plural), _noun_phrase(rng, rng.random() < 0.5)]
    if rng.random() < 0.4:
        words.append(rng.choice(_PLACES))
    return " ".join(words) + "."


# The rules a minimal pair breaks, one word apart (BLiMP's format, Warstadt et al. 2020): the
# verb's number, with the subject next to it or past a relative clause whose noun has the other
# number (BLiMP's distractor agreement), and "a"/"an" before the object.
PHENOMENA = ("agreement", "agreement_relative_clause", "a_an")


def minimal_pair(rng: random.Random, phenomenon: str) -> tuple[str, str]:
    """A sentence of the language and the same sentence with the rule `phenomenon` broken.

    The broken word is never the first, so the pair's first tokens agree."""
    if phenomenon not in PHENOMENA:
        raise ValueError(f"phenomenon={phenomenon!r} is not valid: use one of {list(PHENOMENA)}")
    plural = rng.random() < 0.5
    subject = _noun_phrase(rng, plural)
    if phenomenon == "agreement_relative_clause":
        subject += f" that {_verb(rng, plural)} {_noun_phrase(rng, not plural)}"
    verb = rng.choice(_VERBS)
    if phenomenon == "a_an":
        object_ = _noun_phrase(rng, False)
        while object_.startswith("the "):  # a singular noun phrase whose article is a or an
            object_ = _noun_phrase(rng, False)
        swapped = ("an " + object_[2:]) if object_.startswith("a ") else ("a " + object_[3:])
        objects, verbs = (object_, swapped), (_inflect(verb, plural),) * 2
    else:
        object_ = _noun_phrase(rng, rng.random() < 0.5)
        objects, verbs = (object_, object_), (_inflect(verb, plural), _inflect(verb, not plural))
    place = f" {rng.choice(_PLACES)}" if rng.random() < 0.4 else ""
    good, bad = (f"{subject} {v} {o}{place}." for v, o in zip(verbs, objects, strict=True))
    return good, bad


def synthetic_corpus(n_sentences: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_sentences):
        lines.append(" ".join(sentence(rng) for _ in range(rng.randint(1, 3))))
    return "\n".join(lines) + "\n"


class SyntheticCorpusDataModule(TextCorpusDataModule):
    """`TextCorpusDataModule` over `n_sentences` lines of the toy language (seeded, no files)."""

    def __init__(self, *, n_sentences: int = 10_000, corpus_seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        if n_sentences < 1:
            raise UserError(f"data.n_sentences={n_sentences} must be a positive integer")
        self.n_sentences = n_sentences
        self.corpus_seed = corpus_seed

    def read_text(self) -> str:
        return synthetic_corpus(self.n_sentences, self.corpus_seed)
