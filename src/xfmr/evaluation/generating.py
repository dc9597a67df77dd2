"""lm-eval's `generate_until` through xfmr's generation: a request's `gen_kwargs` become a
`GenerationConfig` (greedy unless they ask to sample), and the text is cut at the first stop
sequence of `until`, as HFLM cuts it. Decoding itself stops at the objective's eos where it has
one (an encoder-decoder's </s>), so eos needs no stop string."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError
from xfmr.generation import GenerationConfig
from xfmr.runs.inference import generate_rows, position_limit

# `lm` below is an `xfmr.evaluation.lm_model.XfmrLM`, which imports this module when asked to
# generate: named in words, so that the two modules do not import each other.

log = logging.getLogger("xfmr")

# lm-eval's default for `max_gen_toks` (HFLM's `max_gen_toks`).
DEFAULT_MAX_GEN_TOKS = 256
# gen_kwargs read here; the rest (HF generate's own settings) are left out, with one warning.
KNOWN = ("until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "seed")


@dataclass
class Settings:
    """One request's decoding: the config, and the strings that end its text."""

    config: GenerationConfig
    until: tuple[str, ...]


def settings(gen_kwargs: Mapping[str, Any]) -> Settings:
    """`do_sample: true`, or a temperature above 0 without `do_sample`, samples; otherwise
    greedy. `until`: a string or a list of them."""
    kwargs = dict(gen_kwargs)
    ignored = sorted(set(kwargs) - set(KNOWN))
    if ignored:
        log.warning("generate_until: gen_kwargs %s are not xfmr settings; ignored", ignored)
    until = kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    temperature = float(kwargs.get("temperature", 0.0) or 0.0)
    do_sample = kwargs.get("do_sample")
    sample = bool(do_sample) if do_sample is not None else temperature > 0
    config = {"max_new_tokens": int(kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))}
    if sample:
        config |= {
            "strategy": "sample",
            "temperature": temperature or 1.0,
            "top_k": kwargs.get("top_k"),
            "top_p": kwargs.get("top_p"),
            "seed": kwargs.get("seed"),
        }
    try:
        return Settings(GenerationConfig(**config), tuple(until))
    except ValueError as e:
        raise UserError(f"generate_until's gen_kwargs {gen_kwargs}: {e}") from None


def cut_at_stops(text: str, until: Sequence[str]) -> str:
    """The text before the first of the stop sequences to occur in it."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def fitted_rows(lm: Any, contexts: Sequence[str], new: int) -> tuple[list[list[int]], int]:
    """The contexts' ids cut from the left to `lm.max_length` and, for a decoder with a position
    table, so that they and `new` tokens fit it (new at most the table); an empty context is
    the prefix token."""
    limit = lm.max_length
    table = position_limit(lm.run.model)
    if table is not None and lm.backend == "causal":
        new = min(new, table)
        limit = min(limit, table - new + 1)
    rows = [lm.tok_encode(context)[-limit:] or [lm.prefix_token_id] for context in contexts]
    return rows, new


def generate_until(lm: Any, requests: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Each request's (context, gen_kwargs) continued; requests of the same settings are
    decoded together, `lm.batch_size` rows at a time."""
    groups: dict[str, list[int]] = {}
    for index, (_, gen_kwargs) in enumerate(requests):
        groups.setdefault(json.dumps(gen_kwargs, sort_keys=True, default=str), []).append(index)
    texts = [""] * len(requests)
    for indices in groups.values():
        wanted = settings(requests[indices[0]][1])
        rows, new = fitted_rows(lm, [requests[i][0] for i in indices], wanted.config.max_new_tokens)
        config = GenerationConfig(**{**vars(wanted.config), "max_new_tokens": new})
        hypotheses = generate_rows(lm.run, lm.task, rows, config=config, batch_size=lm.batch_size)
        for index, row_hypotheses in zip(indices, hypotheses, strict=True):
            text = cut_at_stops(lm.tok_decode(row_hypotheses[0].tokens), wanted.until)
            texts[index] = text
            lm.cache_hook.add_partial("generate_until", requests[index], text)
    return texts
