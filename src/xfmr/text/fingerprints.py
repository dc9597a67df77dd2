"""Fingerprints of what a cache is built from: the source files' identity (path, size, mtime),
a tokenizer's serialization, and the short key that names a cache of them, so a changed file
or tokenizer makes a new cache, never a stale one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xfmr.text.tokenizers import TextTokenizer


def tokenizer_hash(tokenizer: TextTokenizer) -> str:
    """sha256 of the tokenizer's serialization, keys sorted: the same for a tokenizer just
    trained and for its tokenizer.json loaded again (DDP workers, later runs)."""
    config = json.loads(tokenizer.tokenizer.to_str())
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def sources(files: Sequence[Path]) -> list[dict[str, Any]]:
    """Each file's identity: absolute path, size and mtime (a change to either is a new cache)."""
    found = []
    for path in files:
        stat = Path(path).stat()
        found.append(
            {"path": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        )
    return found


def cache_key(identity: dict[str, Any]) -> str:
    """A short hash of `identity` (JSON values, keys sorted) that names what was built from it."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
