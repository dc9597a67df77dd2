"""Composition checks run on the composed config before anything heavy is imported.

Each failure is one `UserError` naming the key, the value and what would be valid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xfmr.data.files import text_files
from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.objectives.archs import (
    DATA_CHOICES,
    DATA_KINDS,
    OBJECTIVE_ARCHS,
    OBJECTIVE_CHOICES,
    OBJECTIVE_DATA,
)
from xfmr.text.tokenizers import TokenizerSpec

_GROUPS_NEEDED = ("model", "pos", "data", "tokenizer", "objective", "optim", "trainer", "paths")


def check_config(cfg: DictConfig) -> None:
    for key in _GROUPS_NEEDED:
        if cfg.get(key) is None:
            raise UserError(
                f"config has no `{key}` section: compose it from the {key} group or set it"
            )
    model = model_config(cfg, vocab_size=1)
    if not cfg.get("init_from"):  # else the checkpoint decides the model; the run checks it
        check_objective(cfg, model)
        check_positions(cfg, model)
    check_tokenizer(cfg)
    check_data(cfg)


def model_config(cfg: DictConfig, *, vocab_size: int) -> ModelConfig:
    """The model's dataclass from the `model` and `pos` sections; its errors become UserErrors."""
    values: dict[str, Any] = OmegaConf.to_container(cfg.model, resolve=True)
    values.update(pos=OmegaConf.to_container(cfg.pos, resolve=True), vocab_size=vocab_size)
    try:
        return ModelConfig.from_dict(values)
    except (TypeError, ValueError) as e:
        raise UserError(f"model: {e}") from None


_DATA_FILES = ("train_source", "train_target", "val_source", "val_target", "train_path", "val_path")


def check_data(cfg: DictConfig) -> None:
    """The data gives the examples the objective consumes, and its files exist."""
    objective = _class_name(cfg.objective)
    needs, gives = OBJECTIVE_DATA.get(objective), DATA_KINDS.get(_class_name(cfg.data))
    if needs and gives and needs != gives:
        raise UserError(
            f"objective={OBJECTIVE_CHOICES.get(objective, objective)} trains on {needs}, but the "
            f"data group gives {gives}: use data in {list(DATA_CHOICES[needs])}"
        )
    if cfg.data.get("path", "absent") != "absent":
        text_files(cfg.data.path)
    for key in _DATA_FILES:
        path = cfg.data.get(key)
        if path is None and key in cfg.data:
            raise UserError(f"data.{key} is not set: give the file")
        if path is not None and not Path(path).is_file():
            raise UserError(f"data.{key}={str(path)!r} does not exist")


def _class_name(section: DictConfig) -> str:
    return str(section.get("_target_", "")).rsplit(".", 1)[-1]


def check_objective(cfg: DictConfig, model: ModelConfig) -> None:
    """The objective can train the architecture (no causal LM on a bidirectional encoder)."""
    name = _class_name(cfg.objective)
    archs = OBJECTIVE_ARCHS.get(name)
    if archs is not None and model.arch not in archs:
        serving = [OBJECTIVE_CHOICES[n] for n, a in OBJECTIVE_ARCHS.items() if model.arch in a]
        raise UserError(
            f"objective={OBJECTIVE_CHOICES.get(name, name)} cannot train arch={model.arch}: "
            f"it needs arch in {list(archs)}"
            + (
                f"; arch={model.arch} is trained by objective in {serving}"
                if serving
                else f"; no objective shipped yet trains arch={model.arch}"
            )
        )


def check_positions(cfg: DictConfig, model: ModelConfig) -> None:
    block_size = cfg.data.get("block_size")
    limit = model.pos.max_positions
    if (
        model.pos.name == "learned"
        and block_size is not None
        and limit is not None
        and block_size > limit
    ):
        raise UserError(
            f"data.block_size={block_size} is longer than pos.max_positions={limit} allows with pos=learned: "
            f"set pos.max_positions>={block_size}, lower data.block_size, or use a scheme without a limit "
            f"(pos=sinusoidal or pos=none)"
        )


def check_tokenizer(cfg: DictConfig) -> TokenizerSpec:
    try:
        return TokenizerSpec(**OmegaConf.to_container(cfg.tokenizer, resolve=True))
    except (TypeError, ValueError) as e:
        raise UserError(f"tokenizer: {e}") from None
