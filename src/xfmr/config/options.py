"""The run's smaller sections, as the training layer reads them: `compile`, `throughput`,
`nonfinite`, `finetune`, `slurm` (each a frozen dataclass, conf/train.yaml states their values),
and `logger` and `callbacks` (named entries, each a class and its settings; `name: null`
switches one off)."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError
from xfmr.ranges import (
    COUNT,
    FRACTION_OPEN,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    STEPS,
    TOP_K,
    NumberTable,
    check_numbers,
)
from xfmr.sections import read_section
from xfmr.targets import Target, frozen

# `compile` -> torch.compile's mode; false: eager. reduce-overhead replays the step's kernels
# as CUDA graphs; max-autotune also searches kernel configurations (a long first compile) and
# records CUDA graphs too, max-autotune-no-cudagraphs searches without them; auto is chosen by
# the run once it knows its device and data (`xfmr.training.compiling`).
AUTO_COMPILE = "auto"
COMPILE_MODES = {
    "auto": AUTO_COMPILE,
    "false": None,
    "true": "default",
    "default": "default",
    "reduce-overhead": "reduce-overhead",
    "max-autotune": "max-autotune",
    "max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
}


def compile_mode(value: Any) -> str | None:
    """torch.compile's mode for the config's `compile` (None: the step runs eagerly)."""
    key = str(value).lower() if isinstance(value, bool) or value is None else str(value)
    if key not in COMPILE_MODES and key != "none":
        raise UserError(f"compile={value!r} is not valid: use one of {list(COMPILE_MODES)}")
    return COMPILE_MODES.get(key)


THROUGHPUT_NUMBERS: NumberTable = {"peak_tflops": ((POSITIVE,), "measure it")}
NONFINITE_NUMBERS: NumberTable = {"max_skips": ((COUNT,), None)}
FINETUNE_NUMBERS: NumberTable = {"backbone_lr_scale": ((NON_NEGATIVE,), None)}


@dataclass(frozen=True)
class ThroughputConfig:
    """`throughput.peak_tflops`: one device's peak TFLOP/s, mfu's denominator (None: the
    device's datasheet figure, or measured on a CPU)."""

    peak_tflops: float | None

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> ThroughputConfig:
        return read_section(cls, "throughput", values, THROUGHPUT_NUMBERS)


@dataclass(frozen=True)
class NonfiniteConfig:
    """`nonfinite.max_skips`: non-finite steps left out before one stops the run."""

    max_skips: int

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> NonfiniteConfig:
        return read_section(cls, "nonfinite", values, NONFINITE_NUMBERS)


@dataclass(frozen=True)
class FinetuneConfig:
    """With `init_from`: train the task head alone, or the backbone at a share of the lr."""

    freeze_backbone: bool
    backbone_lr_scale: float

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> FinetuneConfig:
        return read_section(cls, "finetune", values, FINETUNE_NUMBERS)


# Signals that mean something else to a run: stop (INT, TERM), or cannot be caught.
_NOT_REQUEUE = ("SIGINT", "SIGTERM", "SIGKILL", "SIGSTOP")


@dataclass(frozen=True)
class SlurmConfig:
    """Under SLURM: the signal that saves the state ahead of the time limit, and whether the
    job is then requeued (`xfmr.training.slurm`)."""

    requeue_signal: str
    requeue: bool

    @classmethod
    def read(cls, values: Mapping[str, Any] | None) -> SlurmConfig:
        slurm = read_section(cls, "slurm", values)
        signal_named(slurm.requeue_signal, key="slurm.requeue_signal")
        return slurm

    @property
    def signal(self) -> signal.Signals:
        return signal_named(self.requeue_signal, key="slurm.requeue_signal")


def signal_named(name: str, *, key: str) -> signal.Signals:
    """USR1, SIGUSR1 or 10 as a signal; one that stops a run already or cannot be caught is
    refused, naming `key`."""
    text = str(name).strip().upper()
    try:
        signum = (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
        )
    except (KeyError, ValueError):
        signum = None
    if signum is None or signum.name in _NOT_REQUEUE:
        raise UserError(
            f"{key}={name!r} is not a signal a run can be warned with: give one SLURM sends "
            "ahead of the time limit (sbatch --signal=USR1@90), e.g. USR1 or USR2; INT and TERM "
            "already stop a run with a checkpoint"
        )
    return signum


# Numeric settings of the shipped callbacks, by entry name.
CALLBACK_NUMBERS: dict[str, NumberTable] = {
    "text_sample": {
        "max_new_tokens": ((STEPS,), None),
        "temperature": ((NON_NEGATIVE,), None),
        "top_k": ((STEPS,), "no top-k filter"),
        "max_context": ((STEPS,), "the whole context"),
        "seed": ((SEED,), None),
    },
    "model_checkpoint": {"save_top_k": ((TOP_K,), None)},
    "periodic_checkpoint": {
        "every_n_train_steps": ((COUNT,), None),
        "every_n_epochs": ((COUNT,), None),
        "save_top_k": ((TOP_K,), None),
    },
    "progress_bar": {"refresh_rate": ((COUNT,), None)},
    "lm_eval": {
        "every_n_steps": ((STEPS,), None),
        "limit": ((STEPS, FRACTION_OPEN), "every question of each task"),
        "batch_size": ((STEPS,), None),
    },
}


@dataclass(frozen=True)
class Targets:
    """Named entries, each a class and its settings (`logger`, `callbacks`); an entry set to
    null is switched off and left out."""

    entries: Mapping[str, Target]

    @classmethod
    def read(
        cls,
        section: str,
        values: Mapping[str, Any] | None,
        numbers: Mapping[str, NumberTable] | None = None,
    ) -> Targets:
        entries = {}
        for name, item in (values or {}).items():
            if item is None:
                continue
            if not isinstance(item, Mapping):
                raise UserError(
                    f"{section}.{name}={item!r} is not valid: give a class and its settings "
                    f"(`{section}.{name}._target_=...`) or null to switch it off"
                )
            entries[name] = Target.read(f"{section}.{name}", item)
            check_numbers(
                f"{section}.{name}", entries[name].settings, (numbers or {}).get(name, {})
            )
        return cls(frozen(entries))

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, name: str) -> Target | None:
        return self.entries.get(name)

    def replaced(self, entry: str, **settings: Any) -> Targets:
        """The entries with `entry`'s settings changed (the run's own, e.g. a sweep's names)."""
        target = self.entries[entry]
        changed = dataclasses.replace(target, settings=frozen({**target.settings, **settings}))
        return Targets(frozen({**self.entries, entry: changed}))

    def build(self) -> list[Any]:
        return [target.build() for target in self.entries.values()]

    def to_dict(self) -> dict[str, Any]:
        return {name: target.to_dict() for name, target in self.entries.items()}
