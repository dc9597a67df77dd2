"""The `data` section: the data module a run reads (`_target_`) and its settings, checked before
anything heavy loads: the keys its constructor takes, the numbers' ranges, the kind of examples
it gives, and the files it names (each exists and holds text). Nothing here imports torch.

The objective decides what kind of examples it needs; `DataConfig.check_feeds` compares the
two when the run's config is read (`xfmr.config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xfmr.data.files import check_text_head, text_files
from xfmr.data.settings import (
    AUTO_WORKERS,
    HF_PATH_CHOICES,
    ChosenWorkers,
    check_squad_windows,
    check_text_documents,
    parallel_files,
)
from xfmr.data.sources import fetch_hint
from xfmr.declared import declared
from xfmr.errors import UserError
from xfmr.ranges import FRACTION_OPEN, SEED, STEPS, WORKERS, NumberTable, check_numbers
from xfmr.targets import Target, TargetSection, frozen

# Each numeric key a data module may take: its forms, and what null means where allowed.
NUMBERS: NumberTable = {
    "batch_size": ((STEPS,), None),
    "block_size": ((STEPS,), None),
    "train_stride": ((STEPS,), None),
    "val_batches": ((STEPS,), "every window of the validation split"),
    "num_workers": ((WORKERS,), None),
    "val_fraction": ((FRACTION_OPEN,), "validate on data.val_split"),
    "max_length": ((STEPS,), "no limit"),
    "max_query_length": ((STEPS,), None),
    "doc_stride": ((STEPS,), "only the first window of a long context"),
    "n_sentences": ((STEPS,), None),
    "n_pairs": ((STEPS,), None),
    "corpus_seed": ((SEED,), None),
    "val_seed": ((SEED,), None),
    "val_rows": ((STEPS,), "validate on data.val_split"),
    "shuffle_buffer": ((STEPS,), None),
}
_FILE_KEYS = ("train_source", "train_target", "val_source", "val_target", "train_path", "val_path")
_PARALLEL = "ParallelDataModule"
_SQUAD = "SquadDataModule"
# What a sequence is cut to: token blocks (text) or whole examples cut to a length.
LENGTH_KEYS = ("block_size", "max_length")


@dataclass(frozen=True)
class DataConfig(TargetSection):
    """The data module and its settings.

    Args:
        target: the module's class or factory and its keyword arguments.
        kind: the kind of examples it gives (`xfmr.kinds`): the one its class declares, or
            for a factory that gives several (data=hf) the one `data.kind` chooses.
        workers_chosen: `num_workers` is what `auto` became for the run's device
            (`xfmr.config.make.resolve`), which the module is told (`ChosenWorkers`).
    """

    target: Target
    kind: str | None = None
    workers_chosen: bool = False

    @classmethod
    def read(cls, values: Mapping[str, Any], *, check_files: bool = True) -> DataConfig:
        """The section as composed; each mistake is one UserError naming the key."""
        target = Target.read("data", values)
        check_numbers("data", target.settings, NUMBERS)
        config = cls(target, _kind(target))
        if config.kind == "text":
            check_text_documents(target.settings)
        if check_files:
            config.check_files()
        return config

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.target.settings

    def get(self, key: str, default: Any = None) -> Any:
        return self.target.get(key, default)

    @property
    def batch_size(self) -> int | None:
        return self.get("batch_size")

    @property
    def length(self) -> tuple[str, int] | None:
        """(`data.KEY`, value) of the length its sequences are cut to, if it sets one."""
        for key in LENGTH_KEYS:
            if self.get(key) is not None:
                return f"data.{key}", int(self.get(key))
        return None

    def check_files(self) -> None:
        """Every file the section names exists and holds text (read from its head only)."""
        if isinstance(_declared_kind(self.target), tuple):  # data=hf: data.path names a dataset
            if not self.get("path"):
                raise UserError(f"data.path is not set: {HF_PATH_CHOICES}")
        elif "path" in self.settings:
            for file in text_files(self.get("path")):
                check_text_head(file)
        if self.target.name == _SQUAD:
            check_squad_windows(self.settings)
        keys = parallel_files(self.settings) if self.target.name == _PARALLEL else _FILE_KEYS
        for key in keys:
            path = self.get(key)
            if path is None and key in self.settings:
                raise UserError(f"data.{key} is not set: give the file")
            if path is not None and not Path(path).is_file():
                raise UserError(f"data.{key}={str(path)!r} does not exist{fetch_hint(path)}")
            if path is not None:
                check_text_head(Path(path), key=f"data.{key}")

    def check_feeds(self, objective: str, reads: str, choices: list[str]) -> None:
        """The data gives the kind of examples `objective` reads (`choices`: the data groups
        that can)."""
        if reads and self.kind and reads != self.kind:
            raise UserError(
                f"objective={objective} trains on {reads}, but the data group gives "
                f"{self.kind}: use data in {choices}"
                + (f" (data=hf: data.kind={reads})" if "hf" in choices else "")
            )

    def check_packing(
        self, objective: str, packs: bool, packing: list[str], *, arch: str | None = None
    ) -> None:
        """`data.packing=true` only for an objective that packs (`packing`: those that do), on
        a model that keeps packed documents apart (an RNN's state runs on from one to the
        next)."""
        if self.get("packing") and not packs:
            raise UserError(
                f"data.packing=true: objective={objective} does not pack its batches; "
                f"objective in {packing} does, or leave data.packing=false"
            )
        if self.get("packing") and arch == "rnn":
            raise UserError(
                "data.packing=true: arch=rnn carries its state from one document to the next; "
                "use arch=decoder, or leave data.packing=false"
            )

    def with_settings(self, **settings: Any) -> DataConfig:
        """The same data with `settings` changed (a resolved value, or an evaluation's files)."""
        target = dataclasses.replace(self.target, settings=frozen({**self.settings, **settings}))
        return dataclasses.replace(self, target=target)

    @property
    def auto_workers(self) -> bool:
        """Whether `data.num_workers` is left to the device (`auto`)."""
        return self.get("num_workers") == AUTO_WORKERS

    def build(self, **given: Any) -> Any:
        """The data module (`given`: what only the run knows, e.g. a finished run's labels)."""
        if self.workers_chosen:
            given = {"num_workers": ChosenWorkers(self.get("num_workers")), **given}
        return self.target.build(**given)

    def to_dict(self) -> dict[str, Any]:
        return self.target.to_dict()


def _declared_kind(target: Target) -> str | tuple[str, ...] | None:
    try:
        return declared(target.path, ("gives",)).get("gives")
    except (ImportError, AttributeError, ValueError):
        raise UserError(f"data._target_={target.path}: no such class or function") from None


def _kind(target: Target) -> str | None:
    """What the data gives: the kind its module declares, or `data.kind` among the kinds it
    declares (data=hf)."""
    declared_kind = _declared_kind(target)
    if not isinstance(declared_kind, tuple):
        return declared_kind
    kind = target.get("kind")
    if kind not in declared_kind:
        raise UserError(f"data.kind={kind!r} is not valid: use one of {list(declared_kind)}")
    return kind


# Random windows of a memory-mapped token stream are cheap to batch: a few workers keep up.
MAX_AUTO_WORKERS = 4


def auto_workers(device_type: str, *, cpus: int, local_world_size: int) -> int:
    """`data.num_workers=auto`: none off CUDA (a CPU's cores train the model; workers would
    compete with them); on CUDA, this process's share of the CPUs (`cpus` over the processes
    training on this machine) less one for the training process, at most `MAX_AUTO_WORKERS`."""
    if device_type != "cuda":
        return 0
    return max(0, min(MAX_AUTO_WORKERS, cpus // max(1, local_world_size) - 1))
