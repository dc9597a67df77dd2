"""The tables every model key's `Key` gives (`xfmr.nn.config`), derived from the fields: the keys
an architecture ignores, the keys an `init_from` run or a resumed one may change, the keys every
value of which exports, the table of model keys in docs/architectures.md, and how two models
differ. No torch."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from xfmr.nn.config import ModelConfig, PosConfig, field_named
from xfmr.nn.key import (
    ARCHS,
    TRANSFORMER_ARCHS,
    TYPE_NAMES,
    accepts,
    default,
    key_of,
    plain_types,
    yaml_text,
)


def differences(
    ours: ModelConfig, theirs: ModelConfig, *, ignore: frozenset[str] = frozenset()
) -> list[tuple[str, Any, Any]]:
    """(key, ours, theirs) for each key whose value differs, by dotted name (`pos.name`), in
    the fields' order; a key the architecture does not read is not a difference, nor one in
    `ignore`."""
    a, b = ours.flat(), theirs.flat()
    same_arch = ours.arch == theirs.arch
    return [
        (k, a.get(k), b.get(k))
        for k in [*a, *(k for k in b if k not in a)]
        if k not in ignore and a.get(k) != b.get(k) and not (same_arch and not ours.reads(k))
    ]


def arch_only_keys() -> dict[str, tuple[str, ...]]:
    """Each key that some architectures do not read -> the architectures that do."""
    return {f.name: key_of(f).archs for f in fields(ModelConfig) if key_of(f).archs != ARCHS}


def fine_tune_keys() -> frozenset[str]:
    """The dotted keys a run started `init_from` another may change (see `Key.fine_tune`)."""
    top = {f.name for f in fields(ModelConfig) if key_of(f).fine_tune}
    return frozenset(top | {f"pos.{f.name}" for f in fields(PosConfig) if key_of(f).fine_tune})


def resume_keys() -> frozenset[str]:
    """The keys a resumed run may change (see `Key.resume`)."""
    return frozenset(f.name for f in fields(ModelConfig) if key_of(f).resume)


def exporting_keys() -> frozenset[str]:
    """The dotted keys whose every value exports (see `Key.exports`)."""
    top = {f.name for f in fields(ModelConfig) if key_of(f).exports}
    return frozenset(top | {f"pos.{f.name}" for f in fields(PosConfig) if key_of(f).exports})


def keys_table() -> str:
    """The table of model keys in docs/architectures.md, written from the fields (a test holds the
    page to it)."""
    rows = [
        "| key | default | read by | fine-tune may change | what it is |",
        "|---|---|---|---|---|",
    ]
    for prefix, cls in (("model.", ModelConfig), ("model.pos.", PosConfig)):
        for f in fields(cls):
            facts = key_of(f)
            if f.name in ("vocab_size", "pos"):
                continue
            usual = yaml_text(default(f))
            choices = f" ({', '.join(facts.choices)})" if facts.choices else ""
            archs = (
                "all"
                if facts.archs == ARCHS
                else "transformers"
                if facts.archs == TRANSFORMER_ARCHS
                else ", ".join(facts.archs)
            )
            fine = "yes" if facts.fine_tune else ""
            rows.append(
                f"| `{prefix}{f.name}` | `{usual}` | {archs} | {fine} | {facts.doc}{choices} |"
            )
    return "\n".join(rows)


def model_keys() -> list[str]:
    """Every key of the `model` section by its dotted name (`pos.name`)."""
    top = [f.name for f in fields(ModelConfig) if f.name not in ("vocab_size", "pos")]
    return [
        *top,
        *(f"pos.{f.name}" for f in fields(PosConfig) if f.name not in ("target", "options")),
    ]


def value_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be model key `name` (a top-level key) by its type, or None."""
    found = field_named(name)
    names = plain_types(found) if found is not None else None
    if not names or any(accepts(n, value) for n in names):
        return None
    valid = " or ".join(TYPE_NAMES.get(n, "null") for n in names)
    return f"model.{name}={value!r} must be {valid}"
