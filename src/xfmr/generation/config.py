"""What a decoding run is asked to do, and what it returns. Imports no torch, so a CLI can check
`generation.*` settings before anything heavy loads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError

STRATEGIES = ("greedy", "beam", "sample")
LENGTH_PENALTY_FORMS = ("average", "gnmt")


@dataclass
class GenerationConfig:
    """How to decode; every field is checked on construction.

    Args:
        strategy: "greedy" (the most likely token each step), "beam" (beam search) or "sample"
            (ancestral sampling).
        max_new_tokens: tokens generated after the prompt / decoder start token; None: as
            many as reach the length the run was trained on (`xfmr.runs.inference`
            fits it to the run before decoding).
        min_new_tokens: eos is blocked before this many new tokens.
        num_beams: beam width (beam only); < 1 is an error whatever the strategy.
        n_best: hypotheses returned per input, best first (beam: <= num_beams; sample: that many
            independent samples; greedy: 1).
        length_penalty: alpha; 0 ranks beam hypotheses by their plain sum of log-probs.
        length_penalty_form: "average" divides the sum by L**alpha, L the number of generated
            tokens including eos (alpha = 1: the mean log-prob; Hugging Face's form);
            "gnmt" divides by ((5 + L) / 6)**alpha (Wu et al. 2016, eq. 14).
        early_stopping: beam: a source is done once num_beams hypotheses have finished. False
            keeps searching until no running beam can still beat the worst of them.
        no_repeat_ngram_size: no n-gram of this size appears twice in the decoded sequence
            (prompt or decoder start token included); 0 = off.
        temperature: sample only; logits are divided by it (> 0).
        top_k: sample only; draw from the k most likely tokens (>= 1; None = all).
        top_p: sample only; draw from the smallest set of most likely tokens whose probability
            reaches p (Holtzman et al. 2020, nucleus sampling), in (0, 1]; None = all.
        seed: sample only; the same seed and input give the same samples, whatever the batch.
        use_cache: keep keys and values between steps (a KV cache); False runs a full forward
            pass every step (the same outputs, slower).
    """

    strategy: str = "greedy"
    max_new_tokens: int | None = 64
    min_new_tokens: int = 0
    num_beams: int = 5
    n_best: int = 1
    length_penalty: float = 0.75
    length_penalty_form: str = "average"
    early_stopping: bool = True
    no_repeat_ngram_size: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    use_cache: bool = True

    def __post_init__(self) -> None:
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_choice("length_penalty_form", self.length_penalty_form, LENGTH_PENALTY_FORMS)
        if self.max_new_tokens is not None:
            _check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        _check_int("min_new_tokens", self.min_new_tokens, minimum=0)
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            _fail("min_new_tokens", self.min_new_tokens, f"<= max_new_tokens={self.max_new_tokens}")
        _check_int("num_beams", self.num_beams, minimum=1)
        _check_int("n_best", self.n_best, minimum=1)
        _check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, minimum=0)
        for name in ("early_stopping", "use_cache"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, getattr(self, name), "true or false")
        _check_number("length_penalty", self.length_penalty, "a finite number")
        _check_number("temperature", self.temperature, "a number > 0", positive=True)
        if self.top_k is not None:
            _check_int("top_k", self.top_k, minimum=1)
        if self.top_p is not None:
            _check_number("top_p", self.top_p, "a number in (0, 1]", positive=True)
            if self.top_p > 1:
                _fail("top_p", self.top_p, "a number in (0, 1]")
        if self.seed is not None:
            _check_int("seed", self.seed, minimum=0)
        self._check_n_best()

    def _check_n_best(self) -> None:
        if self.strategy == "beam" and self.n_best > self.num_beams:
            _fail("n_best", self.n_best, f"<= num_beams={self.num_beams} for strategy=beam")
        if self.strategy == "greedy" and self.n_best != 1:
            _fail("n_best", self.n_best, "1 for strategy=greedy (use beam or sample for more)")


@dataclass
class Hypothesis:
    """One decoded sequence.

    Args:
        tokens: generated ids only: no prompt, no decoder start token, no eos.
        score: what ranks it: beam search's length-penalised sum of log-probs; for greedy and
            sample, the plain sum of the model's log-probs (temperature and filters aside).
            Both count the eos token when there is one.
        finished: True if it ended with eos; False if it hit max_new_tokens.
    """

    tokens: list[int]
    score: float
    finished: bool


def _fail(name: str, value: object, valid: str) -> None:
    raise ValueError(f"generation.{name}={value!r} is not valid: use {valid}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        _fail(name, value, f"one of {list(choices)}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(name, value, f"an integer >= {minimum}")


def _check_number(name: str, value: object, valid: str, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(name, value, valid)
    if positive and value <= 0:
        _fail(name, value, valid)


def generation_settings(section: Any) -> tuple[GenerationConfig, int]:
    """`generation.*` as (GenerationConfig, batch_size), checked without torch."""
    from omegaconf import OmegaConf

    values = (
        OmegaConf.to_container(section, resolve=True)
        if OmegaConf.is_config(section)
        else dict(section)
    )
    batch_size = values.pop("batch_size", 1)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"generation.batch_size={batch_size!r} must be a positive integer")
    try:
        return GenerationConfig(**values), batch_size
    except TypeError as e:  # a key the dataclass does not know
        raise UserError(f"generation: {e}") from None
    except ValueError as e:
        raise UserError(str(e)) from None
