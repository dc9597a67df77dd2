"""The numeric keys of xfmr-train's config, each with its type and range, in one table; checked on
the composed config before anything is built, so a mistake answers in about a second.

A key the composed config does not have (another data module's, a switched-off callback's) is
skipped. `model.*`, positions included, is checked by `ModelConfig` itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xfmr.errors import UserError


@dataclass(frozen=True)
class Number:
    """Integers (`whole`) or any finite number, within [low, high]; `open_low` / `open_high`
    leave a bound out. `special` lists values allowed outside the range (a number, or a word
    such as auto) and what they mean; `items` asks for a list of that many."""

    whole: bool = False
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    special: dict[int | str, str] = field(default_factory=dict)
    items: int | None = None

    def accepts(self, value: Any) -> bool:
        if self.items is not None:
            return (
                isinstance(value, list | tuple)
                and len(value) == self.items
                and all(self._accepts_one(v) for v in value)
            )
        return self._accepts_one(value)

    def _accepts_one(self, value: Any) -> bool:
        if isinstance(value, str):
            return value in self.special
        kinds = int if self.whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            return False
        if value in self.special:
            return True
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.whole else "a number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            text = f"{kind} in {left}{_num(self.low)}, {_num(self.high)}{right}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.open_low else '>='} {_num(self.low)}"
        else:
            text = kind
        if self.items is not None:
            text = f"a list of {self.items} numbers, each {text.split(' ', 2)[-1]}"
        specials = [f"{value} ({meaning})" for value, meaning in self.special.items()]
        return ", or ".join([text, *specials])


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


STEPS = Number(whole=True, low=1)
COUNT = Number(whole=True, low=0)
FRACTION_OPEN = Number(low=0, high=1, open_low=True, open_high=True)
FRACTION = Number(low=0, high=1)
NON_NEGATIVE = Number(low=0)
POSITIVE = Number(low=0, open_low=True)
SEED = Number(whole=True, low=0, high=2**32 - 1)  # numpy's seed range (Lightning seeds it too)
RUN_STEPS = Number(whole=True, low=1, special={-1: "no step limit: trainer.max_epochs ends it"})
TOP_K = Number(whole=True, low=0, special={-1: "keep every checkpoint"})
WORKERS = Number(whole=True, low=0, special={"auto": "chosen for the device the run trains on"})

# Each key: the forms it accepts (any one will do), and what null means where null is allowed.
NUMERIC_KEYS: dict[str, tuple[tuple[Number, ...], str | None]] = {
    "seed": ((SEED,), None),
    "trainer.max_steps": ((RUN_STEPS,), None),
    "trainer.max_epochs": (
        (Number(whole=True, low=1, special={-1: "no epoch limit"}),),
        "Lightning's default",
    ),
    "trainer.val_check_interval": (
        (Number(whole=True, low=1), Number(low=0, high=1, open_low=True)),
        "once per epoch",
    ),
    "trainer.check_val_every_n_epoch": ((STEPS,), "count optimizer steps across epochs"),
    "trainer.limit_train_batches": ((COUNT, FRACTION), "all"),
    "trainer.limit_val_batches": ((COUNT, FRACTION), "all"),
    "trainer.num_sanity_val_steps": (
        (Number(whole=True, low=0, special={-1: "every validation batch"}),),
        None,
    ),
    "trainer.log_every_n_steps": ((STEPS,), None),
    "trainer.gradient_clip_val": ((NON_NEGATIVE,), "no clipping"),
    "trainer.accumulate_grad_batches": ((STEPS,), None),
    "trainer.num_nodes": ((STEPS,), None),
    "optim.lr": ((NON_NEGATIVE,), None),
    "optim.weight_decay": ((NON_NEGATIVE,), None),
    "optim.eps": ((NON_NEGATIVE,), None),
    "optim.momentum": ((NON_NEGATIVE,), None),
    "optim.betas": ((Number(low=0, high=1, open_high=True, items=2),), None),
    "schedule.warmup_steps": ((COUNT,), "schedule.warmup_ratio of the run"),
    "schedule.warmup_ratio": ((FRACTION,), "no warm-up unless schedule.warmup_steps"),
    "schedule.min_lr_ratio": ((FRACTION,), None),
    "schedule.decay_steps": ((STEPS,), "trainer.max_steps"),
    "schedule.d_model": ((STEPS,), None),
    "data.batch_size": ((STEPS,), None),
    "data.block_size": ((STEPS,), None),
    "data.train_stride": ((STEPS,), None),
    "data.val_batches": ((STEPS,), "every window of the validation split"),
    "data.num_workers": ((WORKERS,), None),
    "data.val_fraction": ((FRACTION_OPEN,), "validate on data.val_split"),
    "data.max_length": ((STEPS,), "no limit"),
    "data.max_query_length": ((STEPS,), None),
    "data.doc_stride": ((STEPS,), "only the first window of a long context"),
    "data.n_sentences": ((STEPS,), None),
    "data.n_pairs": ((STEPS,), None),
    "data.corpus_seed": ((SEED,), None),
    "data.val_seed": ((SEED,), None),
    "data.val_rows": ((STEPS,), "validate on data.val_split"),
    "data.shuffle_buffer": ((STEPS,), None),
    "objective.max_length": ((STEPS,), None),
    "objective.select_rate": ((FRACTION_OPEN,), None),
    "objective.mask_rate": ((FRACTION,), None),
    "objective.random_rate": ((FRACTION,), None),
    "objective.label_smoothing": ((Number(low=0, high=1, open_high=True),), None),
    "objective.noise_density": ((FRACTION_OPEN,), None),
    "objective.mean_span_length": ((Number(low=1),), None),
    "objective.n_sentinels": ((STEPS,), None),
    "objective.max_answer_length": ((STEPS,), None),
    "tokenizer.vocab_size": ((STEPS,), "the kind's own size"),
    "tokenizer.train_sample_mb": ((POSITIVE,), None),
    "callbacks.text_sample.max_new_tokens": ((STEPS,), None),
    "callbacks.text_sample.temperature": ((NON_NEGATIVE,), None),
    "callbacks.text_sample.top_k": ((STEPS,), "no top-k filter"),
    "callbacks.text_sample.max_context": ((STEPS,), "the whole context"),
    "callbacks.text_sample.seed": ((SEED,), None),
    "callbacks.model_checkpoint.save_top_k": ((TOP_K,), None),
    "callbacks.periodic_checkpoint.every_n_train_steps": ((COUNT,), None),
    "callbacks.periodic_checkpoint.every_n_epochs": ((COUNT,), None),
    "callbacks.periodic_checkpoint.save_top_k": ((TOP_K,), None),
    "callbacks.progress_bar.refresh_rate": ((COUNT,), None),
    "throughput.peak_tflops": ((POSITIVE,), "measure it"),
    "finetune.backbone_lr_scale": ((NON_NEGATIVE,), None),
    "nonfinite.max_skips": ((COUNT,), None),
}

_ABSENT = object()


def check_numbers(cfg: DictConfig) -> None:
    """Every key of `NUMERIC_KEYS` the config has holds a number of its type and range."""
    for key, (forms, null) in NUMERIC_KEYS.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT or (value is None and null is not None):
            continue
        if OmegaConf.is_list(value):
            value = OmegaConf.to_container(value)
        if not any(form.accepts(value) for form in forms):
            valid = " or ".join(form.describe() for form in forms)
            if null is not None:
                valid += f", or null ({null})"
            raise UserError(f"{key}={value!r} is not valid: use {valid}")


def check_run_length(cfg: DictConfig) -> None:
    """The run ends, and its warm-up and decay fit inside it."""
    trainer = cfg.trainer
    max_steps, max_epochs = trainer.get("max_steps"), trainer.get("max_epochs")
    if max_steps == -1 and max_epochs == -1:
        raise UserError(
            "trainer.max_steps=-1 with trainer.max_epochs=-1 never ends: set trainer.max_steps "
            "to a number of optimizer steps, or trainer.max_epochs to a number of epochs"
        )
    schedule = cfg.get("schedule")
    if schedule:
        _check_warmup(schedule, max_steps if max_steps and max_steps > 0 else None)


def _check_warmup(schedule: DictConfig, max_steps: int | None) -> None:
    """A warm-up set in steps fits in a run set in steps (one given as a share of the run
    always does); the decay ends after it; noam and inverse_sqrt have one."""
    steps, ratio = schedule.get("warmup_steps"), schedule.get("warmup_ratio")
    given = (
        f"schedule.warmup_steps={steps}" if steps is not None else f"schedule.warmup_ratio={ratio}"
    )
    if max_steps is not None and steps is not None and steps > max_steps:
        raise UserError(
            f"schedule.warmup_steps={steps} is longer than the run, trainer.max_steps="
            f"{max_steps}: the learning rate would never reach optim.lr; use "
            f"schedule.warmup_steps<={max_steps}, a longer trainer.max_steps, or "
            "schedule.warmup_steps=null with schedule.warmup_ratio (a share of the run)"
        )
    decay = schedule.get("decay_steps")
    if decay is not None and (steps is not None or max_steps is not None):
        warmup = warmup_length(steps, ratio, max_steps or 0)
        if decay < warmup:
            raise UserError(
                f"schedule.decay_steps={decay} ends the decay before the warm-up ({given}: "
                f"{warmup} steps) ends: use schedule.decay_steps>={warmup}"
            )
    name = str(schedule.get("_target_", "")).rsplit(".", 1)[-1]
    if name in _WARMUP_DIVIDES and (steps == 0 or (steps is None and not ratio)):
        raise UserError(
            f"{given} with schedule={name}: its lr formula divides by the warm-up; use "
            "schedule.warmup_steps>=1 or schedule.warmup_ratio>0"
        )


def warmup_length(steps: int | None, ratio: float | None, total_steps: int) -> int:
    """The warm-up in optimizer steps: `schedule.warmup_steps` when set, else
    `schedule.warmup_ratio` of the run's `total_steps`, rounded and at least one step (Hugging
    Face's `warmup_ratio`), so a shipped warm-up follows the length of the run; else none."""
    if steps is not None:
        return int(steps)
    if not ratio:
        return 0
    return max(1, round(ratio * total_steps))


_WARMUP_DIVIDES = ("noam", "inverse_sqrt")  # xfmr.training.optim
