"""The `trainer` section: Lightning's Trainer (`_target_`) and its settings, as the training
layer reads them: the devices and processes, the precision (`auto` resolved here, once, for
the device the run trains on), the run's length and cadence, clipping and accumulation.

Checked before torch loads; torch is asked only where a GPU may be (`xfmr.devices`: to count
them, or to ask for bfloat16).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xfmr.devices import (
    accelerator_found,
    cpu_cores,
    cuda_available,
    cuda_bf16,
    cuda_device_count,
    cuda_name,
    device_count,
)
from xfmr.errors import UserError
from xfmr.nn.config import TRANSFORMER_ARCHS
from xfmr.ranges import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    RUN_STEPS,
    STEPS,
    Number,
    NumberTable,
    check_numbers,
)
from xfmr.targets import Target, TargetSection, frozen

NUMBERS: NumberTable = {
    "max_steps": ((RUN_STEPS,), None),
    "max_epochs": (
        (Number(whole=True, low=1, special={-1: "no epoch limit"}),),
        "Lightning's default",
    ),
    "val_check_interval": (
        (Number(whole=True, low=1), Number(low=0, high=1, open_low=True)),
        "once per epoch",
    ),
    "check_val_every_n_epoch": ((STEPS,), "count optimizer steps across epochs"),
    "limit_train_batches": ((COUNT, FRACTION), "all"),
    "limit_val_batches": ((COUNT, FRACTION), "all"),
    "num_sanity_val_steps": (
        (Number(whole=True, low=0, special={-1: "every validation batch"}),),
        None,
    ),
    "log_every_n_steps": ((STEPS,), None),
    "gradient_clip_val": ((NON_NEGATIVE,), "no clipping"),
    "accumulate_grad_batches": ((STEPS,), None),
    "num_nodes": ((STEPS,), None),
}
AUTO_PRECISION = "auto"
FLOAT16_PRECISIONS = ("16", "16-mixed", "16-true")
# Lightning's precision settings (lightning.fabric.plugins.precision.precision), aliases last.
PRECISIONS = (
    "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true",
    "transformer-engine", "transformer-engine-float16", "32", "bf16", "16", "64",
)  # fmt: skip
# trainer=fsdp's strategy (`xfmr.training.sharding`), named by its `_target_`.
SHARDED_STRATEGY = "xfmr.training.sharding.ShardedStrategy"
SHARDED_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")  # what the strategy runs
# trainer.matmul_precision: `torch.set_float32_matmul_precision`'s settings, for the float32
# matmuls of a run (all of a 32-true run's; the few autocast leaves in float32 under *-mixed).
# highest: float32 throughout, torch's default; high: TF32 (10-bit mantissa) on tensor cores
# (Ampere and later), or bfloat16x3 where there is none; medium: bfloat16 on tensor cores.
MATMUL_PRECISIONS = ("highest", "high", "medium")
DEFAULT_MATMUL_PRECISION = "highest"  # 32-true stays exact float32, as before the key
MATMUL_KEY = "matmul_precision"
_GPU = ("gpu", "cuda", "auto")
# What the run gives the Trainer itself (`xfmr.training.fitting`).
_SUPPLIED = ("callbacks", "logger", "plugins", "default_root_dir")


@dataclass(frozen=True)
class TrainerConfig(TargetSection):
    """Lightning's Trainer and its settings (conf/trainer/), and xfmr's own key beside them.

    Args:
        target: Lightning's Trainer and its keyword arguments.
        matmul_precision: `trainer.matmul_precision`, one of MATMUL_PRECISIONS, set with
            `torch.set_float32_matmul_precision` for the run's fitting (not a Trainer argument).
    """

    target: Target
    matmul_precision: str = DEFAULT_MATMUL_PRECISION

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> TrainerConfig:
        values = dict(values)
        matmul = values.pop(MATMUL_KEY, DEFAULT_MATMUL_PRECISION)
        if matmul not in MATMUL_PRECISIONS:
            raise UserError(
                f"trainer.{MATMUL_KEY}={matmul!r} is not one of {list(MATMUL_PRECISIONS)} "
                "(torch.set_float32_matmul_precision's settings)"
            )
        target = Target.read("trainer", values, supplied=_SUPPLIED)
        check_numbers("trainer", target.settings, NUMBERS)
        trainer = cls(target, matmul)
        if trainer.max_steps == -1 and trainer.max_epochs == -1:
            raise UserError(
                "trainer.max_steps=-1 with trainer.max_epochs=-1 never ends: set trainer.max_steps "
                "to a number of optimizer steps, or trainer.max_epochs to a number of epochs"
            )
        if trainer.precision not in (AUTO_PRECISION, *PRECISIONS):
            valid = [AUTO_PRECISION, *PRECISIONS]
            raise UserError(f"trainer.precision={trainer.precision!r} is not one of {valid}")
        return trainer

    def get(self, key: str, default: Any = None) -> Any:
        return self.target.get(key, default)

    @property
    def accelerator(self) -> str:
        return str(self.get("accelerator") or "auto")

    # A key the section leaves out is Lightning's default (the Trainer's signature): `auto`
    # devices, no step limit.
    @property
    def devices(self) -> Any:
        return self.get("devices", "auto")

    @property
    def precision(self) -> str:
        return str(self.get("precision"))

    @property
    def max_steps(self) -> int:
        return int(self.get("max_steps", -1))

    @property
    def max_epochs(self) -> int | None:
        return self.get("max_epochs")

    @property
    def accumulate(self) -> int:
        """Micro-batches per optimizer step on each process (`accumulate_grad_batches`)."""
        return int(self.get("accumulate_grad_batches") or 1)

    @property
    def sharded(self) -> bool:
        """Whether it shards the model (trainer=fsdp)."""
        strategy = self.get("strategy")
        return isinstance(strategy, Mapping) and strategy.get("_target_") == SHARDED_STRATEGY

    def check_devices(self) -> None:
        """No more processes than the machine has devices: CUDA GPUs, or CPU cores for DDP on
        the CPU (more processes than cores only take turns, each slower than one alone)."""
        try:
            count = device_count(self.devices)
        except ValueError as e:
            raise UserError(str(e)) from None
        if count is None or count <= 1:
            return
        if self.accelerator in _GPU:
            gpus = cuda_device_count()
            if gpus or self.accelerator != "auto":
                if count > gpus:
                    raise UserError(
                        f"trainer.devices={self.devices} asks for {count} GPUs, but this machine "
                        f"has {gpus} CUDA device(s): use trainer.devices<={max(gpus, 1)}"
                        + ("" if gpus else " or trainer.accelerator=cpu")
                    )
                return
        elif self.accelerator != "cpu":
            return  # tpu, mps, ...: Lightning counts them
        cores = cpu_cores()
        if count > cores:
            raise UserError(
                f"trainer.devices={self.devices} asks for {count} processes on the CPU, which has "
                f"{cores} core(s) here: use trainer.devices<={cores}"
            )

    def resolved(self) -> TrainerConfig:
        """`precision=auto` (the default) as the precision the run's device trains in best:
        32-true on a CPU, bf16-mixed on a GPU with bfloat16 (Ampere and later), 16-mixed
        (float16 with loss scaling) on one without; then a precision the device can run."""
        trainer = self
        if self.precision == AUTO_PRECISION:
            trainer = self.with_settings(precision=device_precision(self.accelerator))
        trainer.check_precision()
        return trainer

    def check_precision(self) -> None:
        """No float16 on a CPU (its matmuls run in software there, some hundred times slower
        than float32, where bfloat16 has fast kernels and float32's range), no bfloat16 on a
        GPU without it (before Ampere)."""
        precision, accelerator = self.precision, self.accelerator
        if precision in FLOAT16_PRECISIONS and _runs_on_cpu(accelerator):
            raise UserError(
                f"trainer.precision={precision} on a CPU: float16 matmuls run about 100x slower "
                "than float32 there; use trainer.precision=bf16-mixed (or 32-true)"
            )
        if precision.startswith("bf16") and accelerator in _GPU:
            if cuda_available() and not cuda_bf16():
                raise UserError(
                    f"trainer.precision={precision}: this GPU ({cuda_name()}) "
                    "has no bfloat16; use trainer.precision=16-mixed (float16 with loss "
                    "scaling) or 32-true"
                )

    def check_sharding(self, arch: str) -> None:
        """trainer=fsdp shards per transformer block, and its strategy takes no float16."""
        if not self.sharded:
            return
        if arch not in TRANSFORMER_ARCHS:
            raise UserError(
                f"trainer=fsdp shards a model per transformer block, and arch={arch} has none: "
                "train it with trainer=ddp or trainer=cpu"
            )
        if self.precision not in SHARDED_PRECISIONS:
            raise UserError(
                f"trainer=fsdp with trainer.precision={self.precision}: the sharded strategy "
                f"runs {' or '.join(SHARDED_PRECISIONS)} (no float16 loss scaling); set one of them"
            )

    def with_settings(self, **settings: Any) -> TrainerConfig:
        target = dataclasses.replace(self.target, settings=frozen({**self.settings, **settings}))
        return dataclasses.replace(self, target=target)

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.target.settings

    def build(self, **given: Any) -> Any:
        return self.target.build(**given)

    def to_dict(self) -> dict[str, Any]:
        return {**self.target.to_dict(), MATMUL_KEY: self.matmul_precision}


def device_precision(accelerator: str) -> str:
    """The precision `trainer.precision=auto` picks on `accelerator`."""
    if accelerator not in _GPU or not cuda_available():
        return "32-true"
    return "bf16-mixed" if cuda_bf16() else "16-mixed"


def _runs_on_cpu(accelerator: str) -> bool:
    if accelerator == "cpu":
        return True
    return accelerator == "auto" and not accelerator_found()
