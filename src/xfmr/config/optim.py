"""The `optim` and `schedule` sections: the optimizer (a `_partial_` class its parameter groups
complete) and the learning-rate schedule (a factory of `xfmr.training.optim` the optimizer and
the run's length complete), as the training layer reads them.

The warm-up is given in steps or as a ratio of the run: a ratio is resolved here, once, into
steps when the run's length is known in steps (else the run resolves it from the steps
Lightning estimates), and must fit inside the run.

`optim=muon` (`xfmr.training.muon`) orthogonalises the matrices of transformer blocks, each whole
on its process: `OptimConfig.check_applies` refuses an architecture without blocks and a
strategy that shards them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError
from xfmr.nn.config import TRANSFORMER_ARCHS
from xfmr.ranges import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    STEPS,
    Number,
    NumberTable,
    check_numbers,
    warmup_length,
)
from xfmr.targets import Target, TargetSection, frozen

BETAS = Number(low=0, high=1, open_high=True, items=2)
OPTIM_NUMBERS: NumberTable = {
    "lr": ((NON_NEGATIVE,), None),
    "weight_decay": ((NON_NEGATIVE,), None),
    "eps": ((NON_NEGATIVE,), None),
    "momentum": ((NON_NEGATIVE,), None),
    "betas": ((BETAS,), None),
    # optim=muon's (`xfmr.training.muon.MuonWithAdamW`, where each is described)
    "adamw_lr": ((NON_NEGATIVE,), None),
    "ns_steps": ((Number(whole=True, low=1, high=99),), None),  # torch.optim.Muon: under 100
}
SCHEDULE_NUMBERS: NumberTable = {
    "warmup_steps": ((COUNT,), "schedule.warmup_ratio of the run"),
    "warmup_ratio": ((FRACTION,), "no warm-up unless schedule.warmup_steps"),
    "min_lr_ratio": ((FRACTION,), None),
    "decay_steps": ((STEPS,), "trainer.max_steps"),
    "d_model": ((STEPS,), None),
}
_WARMUP_DIVIDES = ("noam", "inverse_sqrt")  # xfmr.training.optim: their formula divides by it
MUON = "xfmr.training.muon.MuonWithAdamW"  # optim=muon, named by its `_target_`
# Muon's momentum weighs an average (torch's lerp), so it is under 1.
MUON_NUMBERS: NumberTable = {"momentum": ((Number(low=0, high=1, open_high=True),), None)}
MUON_LR_ADJUSTMENTS = ("match_rms_adamw", "original")  # torch.optim.Muon's adjust_lr_fn
# The optimizers model.parametrization=mup has learning rates for (`xfmr.training.mup_groups`).
MUP_OPTIMIZERS = ("torch.optim.AdamW", "torch.optim.Adam", "torch.optim.SGD")


@dataclass(frozen=True)
class OptimConfig(TargetSection):
    """The optimizer: its class, built later with the model's parameter groups."""

    target: Target

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> OptimConfig:
        target = Target.read("optim", values, supplied=("params",))
        check_numbers("optim", target.settings, OPTIM_NUMBERS)
        if target.path == MUON:
            check_numbers("optim", target.settings, MUON_NUMBERS)
            adjust = target.settings.get("adjust_lr_fn")
            if "adjust_lr_fn" in target.settings and adjust not in MUON_LR_ADJUSTMENTS:
                raise UserError(
                    f"optim.adjust_lr_fn={adjust!r} is not valid: use "
                    f"{' or '.join(MUON_LR_ADJUSTMENTS)}"
                )
        return cls(target)

    @property
    def is_muon(self) -> bool:
        return self.target.path == MUON

    def check_applies(self, arch: str, *, sharded: bool, parametrization: str = "sp") -> None:
        """optim=muon needs a transformer's blocks, each matrix whole on every process;
        model.parametrization=mup an optimizer whose µP learning rates are known."""
        if parametrization == "mup" and self.target.path not in MUP_OPTIMIZERS:
            raise UserError(
                f"model.parametrization=mup has learning-rate rules for optim._target_ in "
                f"[{', '.join(MUP_OPTIMIZERS)}] (Yang et al. 2022), not {self.target.path}: use "
                "optim=adamw, or model.parametrization=sp"
            )
        if not self.is_muon:
            return
        archs = ", ".join(TRANSFORMER_ARCHS)
        if arch not in TRANSFORMER_ARCHS:
            # An LSTM's or GRU's matrices stack its gates (weight_ih: (4H, d)), outside any
            # block: not the hidden linear maps Muon's rule is made for.
            raise UserError(
                f"optim=muon orthogonalises the matrices of transformer blocks and arch={arch} "
                f"has none: use optim=muon with arch in [{archs}], or optim=adamw"
            )
        if sharded:
            raise UserError(
                "optim=muon with trainer=fsdp: Muon orthogonalises each matrix whole and the "
                "sharded strategy gives each process a slice of it; use optim=muon with "
                "trainer in [default, cpu, ddp], or optim=adamw with trainer=fsdp"
            )

    @property
    def lr(self) -> float | None:
        return self.target.get("lr")

    @property
    def weight_decay(self) -> float:
        return float(self.target.get("weight_decay") or 0.0)

    @property
    def fused(self) -> bool:
        return bool(self.target.get("fused"))

    def build(self, groups: list[dict[str, Any]], **given: Any) -> Any:
        """The optimizer over `groups` (`given`: settings the run overrides, e.g. fused)."""
        return dataclasses.replace(self.target, partial=False).build(params=groups, **given)

    def to_dict(self) -> dict[str, Any]:
        return self.target.to_dict()


@dataclass(frozen=True)
class ScheduleConfig(TargetSection):
    """The learning-rate schedule: a factory `(optimizer, total_steps=..., **settings)`."""

    target: Target

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> ScheduleConfig:
        target = Target.read("schedule", values, supplied=("optimizer", "total_steps"))
        check_numbers("schedule", target.settings, SCHEDULE_NUMBERS)
        return cls(target)

    def get(self, key: str, default: Any = None) -> Any:
        return self.target.get(key, default)

    def resolved(self, max_steps: int | None) -> ScheduleConfig:
        """Checked against a run of `max_steps` optimizer steps (None: not known in steps),
        with a warm-up given as a ratio resolved into steps where it can be."""
        steps, ratio = self.get("warmup_steps"), self.get("warmup_ratio")
        given = (
            f"schedule.warmup_steps={steps}"
            if steps is not None
            else f"schedule.warmup_ratio={ratio}"
        )
        if max_steps is not None and steps is not None and steps > max_steps:
            raise UserError(
                f"schedule.warmup_steps={steps} is longer than the run, trainer.max_steps="
                f"{max_steps}: the learning rate would never reach optim.lr; use "
                f"schedule.warmup_steps<={max_steps}, a longer trainer.max_steps, or "
                "schedule.warmup_steps=null with schedule.warmup_ratio (a share of the run)"
            )
        decay = self.get("decay_steps")
        if decay is not None and (steps is not None or max_steps is not None):
            warmup = warmup_length(steps, ratio, max_steps or 0)
            if decay < warmup:
                raise UserError(
                    f"schedule.decay_steps={decay} ends the decay before the warm-up ({given}: "
                    f"{warmup} steps) ends: use schedule.decay_steps>={warmup}"
                )
        if self.target.name in _WARMUP_DIVIDES and (steps == 0 or (steps is None and not ratio)):
            raise UserError(
                f"{given} with schedule={self.target.name}: its lr formula divides by the "
                "warm-up; use schedule.warmup_steps>=1 or schedule.warmup_ratio>0"
            )
        if steps is None and max_steps is not None and "warmup_steps" in self.target.settings:
            return self.with_settings(warmup_steps=warmup_length(None, ratio, max_steps))
        return self

    def with_settings(self, **settings: Any) -> ScheduleConfig:
        settings = {**self.target.settings, **settings}
        return ScheduleConfig(dataclasses.replace(self.target, settings=frozen(settings)))

    def build(self, optimizer: Any, *, total_steps: int) -> Any:
        return dataclasses.replace(self.target, partial=False).build(
            optimizer=optimizer, total_steps=total_steps
        )

    def to_dict(self) -> dict[str, Any]:
        return self.target.to_dict()
