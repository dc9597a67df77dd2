"""The message for a key a config section does not have: the nearest keys first, then every
valid one. Every section says it the same way (`model.`, `trainer.`, `optim.`, `data.`, ...)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def nearest_keys(name: str, known: Iterable[str]) -> list[str]:
    """The keys most like a misspelt `name`, best first."""
    return difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)


def unknown_key(section: str, name: str, known: Iterable[str]) -> str:
    """The message for `section.name` (`section` "": a top-level key), which is not among
    `known`: the nearest keys first."""
    known = sorted(known)
    near = nearest_keys(name, known)
    prefix = f"{section}." if section else ""
    hint = f"did you mean {', '.join(f'{prefix}{k}' for k in near)}? " if near else ""
    article = "an" if section[:1] in ("a", "e", "i", "o", "u") else "a"
    what = f"{article} {section} key" if section else "a top-level key"
    return f"{prefix}{name} is not {what}: {hint}(valid keys: {', '.join(known)})"
