"""The run's tokenizer: its own tokenizer.json if it has one, init_from's, or one trained on the
head of the training split (or taken from the cache, for the same text and settings)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from xfmr.errors import UserError
from xfmr.run_dir.files import TOKENIZER_FILE
from xfmr.text.sample import BYTES_PER_MB, survey, training_text
from xfmr.text.tokenizers import TextTokenizer, TokenizerSpec, fit_or_load

log = logging.getLogger("xfmr")


def prepare_tokenizer(
    spec: TokenizerSpec,
    datamodule: Any,
    run_dir: Path,
    *,
    cache_dir: str | None,
    objective: str,
    cache_only: bool = False,
    special_tokens: tuple[str, ...] = (),
    pretrained: Path | None = None,
) -> TextTokenizer:
    """The run's own `tokenizer.json` if it has one (resume, DDP workers); else train or reuse a
    cached one for the same training text and settings, and copy it into the run directory.

    The training text is the head of the training split, at most `tokenizer.train_sample_mb`,
    read a chunk at a time (`xfmr.text.sample`); the cache key is that text's fingerprint, since
    it and the settings alone decide the tokenizer."""
    own = run_dir / TOKENIZER_FILE
    if cache_only:  # another rank of the run: the tokenizer is rank 0's
        return TextTokenizer.load(written_by_rank_zero(own))
    if own.is_file():
        return TextTokenizer.load(own)
    if pretrained is not None:  # the checkpoint's own vocabulary
        tokenizer = pretrained_tokenizer(pretrained, special_tokens, objective)
    else:
        tokenizer = fitted_tokenizer(spec, datamodule, special_tokens, cache_dir=cache_dir)
    tokenizer.save(own)
    return tokenizer


def written_by_rank_zero(path: Path, timeout_s: float = 1800) -> Path:
    """`path` once rank 0 has written it (whole: it is renamed into place). xfmr's own DDP
    workers start after it has; the ranks torchrun or SLURM start with rank 0 (on other nodes,
    with the run directory on a shared filesystem) wait for it, as long as torch.distributed
    would wait for rank 0 to join."""
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} is missing after {timeout_s:.0f} s: rank 0 writes it")
        time.sleep(0.5)
    return path


def pretrained_tokenizer(
    path: Path, special_tokens: tuple[str, ...], objective: str
) -> TextTokenizer:
    """init_from's tokenizer, which must hold the tokens the objective needs."""
    tokenizer = TextTokenizer.load(path)
    missing = [t for t in special_tokens if tokenizer.token_to_id(t) is None]
    if missing:
        raise UserError(
            f"init_from: the source's tokenizer {path} lacks {missing}, which "
            f"objective={objective} needs; pretrain with a "
            f"tokenizer that has them (tokenizer=wordpiece, or list them in "
            f"tokenizer.special_tokens)"
        )
    return tokenizer


def fitted_tokenizer(
    spec: TokenizerSpec,
    datamodule: Any,
    special_tokens: tuple[str, ...],
    *,
    cache_dir: str | None,
) -> TextTokenizer:
    """The tokenizer `spec` describes, fitted on the head of the training split, or the cached
    one fitted on the same text with the same settings."""
    # The objective's tokens ([MASK], sentinels, ...) join the tokenizer's own specials.
    listed = tuple(spec.special_tokens or ())
    extra = tuple(t for t in special_tokens if t not in listed)
    spec = dataclasses.replace(spec, special_tokens=listed + extra) if extra else spec
    max_bytes = round(spec.train_sample_mb * BYTES_PER_MB)
    sample = survey(datamodule, max_bytes) if spec.kind != "pretrained" else None
    if sample is not None and not sample.whole:
        _warn_partial_sample(spec, sample.n_bytes)
    tokenizer, cached = fit_or_load(
        spec,
        training_text(datamodule, max_bytes),  # read only if no cached tokenizer matches
        data_fingerprint=sample.fingerprint if sample else "",
        cache_dir=cache_dir,
    )
    log.info(
        "tokenizer: %s, vocabulary %d (%s)",
        spec.kind,
        tokenizer.vocab_size,
        "cached" if cached else "trained",
    )
    return tokenizer


def _warn_partial_sample(spec: TokenizerSpec, n_bytes: int) -> None:
    unk = f"; characters seen only after it become {spec.unk_token}" if spec.kind == "char" else ""
    log.warning(
        "tokenizer: trained on the first %.3g MB of the training split "
        "(tokenizer.train_sample_mb=%s)%s",
        n_bytes / BYTES_PER_MB,
        spec.train_sample_mb,
        unk,
    )
