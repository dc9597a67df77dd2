"""Weights a run takes from elsewhere: where an `init_from` source's weights and tokenizer are
(`init_source`), and that they, a run directory it resumes (its checkpoints/last.ckpt) and a
checkpoint `ckpt_path` names were trained as the model its config describes. What can be read
without torch (paths, a saved config.yaml, an exported file's header) is checked when the run's
config is read; the run compares the checkpoint itself again once torch has loaded
(`xfmr.training.run.resolve_checkpoint`); `xfmr.parts.transfer` loads the weights."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.nn.model_keys import differences, fine_tune_keys, resume_keys
from xfmr.run_dir.files import (
    BEST_CHECKPOINT,
    CHECKPOINT_DIR,
    CONFIG_FILE,
    HF_CONFIG_FILE,
    HF_TOKENIZER_FILE,
    LAST_CHECKPOINT,
    SAFETENSORS_SUFFIX,
    TOKENIZER_FILE,
    is_checkpoint,
    is_sharded_checkpoint,
)


@dataclass
class InitSource:
    kind: str  # "hf" or "run"
    path: Path  # the HF directory, the .ckpt or the .safetensors file
    tokenizer: Path | None  # the vocabulary the weights were trained with


def init_source(init_from: str | None) -> InitSource | None:
    """Resolve `init_from`: hf:PATH, a run directory (its best, else last checkpoint), a .ckpt
    file inside a run directory or a .safetensors export beside its tokenizer.json; the
    tokenizer comes along so token ids keep their meaning."""
    if not init_from:
        return None
    text = str(init_from)
    if text.startswith("hf:"):
        check_init_from(text)
        path = Path(text[3:]).expanduser()
        for needed in (HF_CONFIG_FILE, HF_TOKENIZER_FILE):
            if not (path / needed).is_file():
                raise UserError(
                    f"init_from={text!r}: {path / needed} is missing (save_pretrained writes both)"
                )
        return InitSource("hf", path, path / HF_TOKENIZER_FILE)
    path = Path(text).expanduser()
    if path.is_dir() and not is_sharded_checkpoint(path):
        run_dir = path
        candidates = [path / CHECKPOINT_DIR / name for name in (BEST_CHECKPOINT, LAST_CHECKPOINT)]
        checkpoint = next((c for c in candidates if is_checkpoint(c)), None)
        if checkpoint is None:
            raise UserError(
                f"init_from={text!r} is a directory without {CHECKPOINT_DIR}/{BEST_CHECKPOINT} "
                f"or {LAST_CHECKPOINT}"
            )
    elif is_checkpoint(path):
        # RUN_DIR/checkpoints/X.ckpt (a file, or a sharded one's folder); an export sits beside its tokenizer (RUN_DIR/X.safetensors)
        exported = path.suffix == SAFETENSORS_SUFFIX
        checkpoint, run_dir = path, path.parent if exported else path.parent.parent
    else:
        raise UserError(
            f"init_from={text!r} does not exist: give an xfmr run directory, a .ckpt file, a "
            f".safetensors file from xfmr-export, or hf:PATH for a Hugging Face checkpoint"
        )
    tokenizer = run_dir / TOKENIZER_FILE
    if not tokenizer.is_file():
        raise UserError(
            f"init_from={text!r}: {tokenizer} is missing, so token ids cannot be matched"
        )
    return InitSource("run", checkpoint, tokenizer)


def check_init_from(init_from: str | None) -> None:
    """Hugging Face checkpoints are read by `transformers`, an optional dependency: without it,
    say which extra installs it, before the run writes anything."""
    if str(init_from or "").startswith("hf:") and importlib.util.find_spec("transformers") is None:
        raise UserError(
            f"init_from={init_from!r} reads Hugging Face checkpoints with the transformers "
            "package, which is not installed: pip install 'xfmr[hf]' (in a checkout: "
            "pip install -e '.[hf]')"
        )


def check_ckpt_path(ckpt_path: str | None) -> None:
    """`ckpt_path` names a checkpoint a run can resume: a .ckpt file (or, under trainer=fsdp, a
    folder of shards) written by xfmr-train, not a weights-only export."""
    if not ckpt_path:
        return
    path = Path(ckpt_path)
    if not is_checkpoint(path):
        raise UserError(
            f"ckpt_path={ckpt_path!r} does not exist: give a .ckpt file (or, under trainer=fsdp, "
            "folder) written by xfmr-train"
        )
    if path.suffix == SAFETENSORS_SUFFIX:
        raise UserError(
            f"ckpt_path={ckpt_path!r} holds weights only, no optimizer or loop state to resume: "
            f"start a new run from it with init_from={ckpt_path}"
        )


def check_resume(run_dir: Path, model: ModelConfig) -> None:
    """A run directory holding checkpoints/last.ckpt resumes it: a model that differs from the
    one saved beside it (config.yaml) is refused now, before torch loads."""
    last = run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
    saved = _saved_model(run_dir)
    if saved is None or not last.exists():  # a file, or a folder of shards (trainer=fsdp)
        return
    differs = differences(saved, at_width_of(model, saved), ignore=resume_keys())
    if differs:
        detail = ", ".join(f"{k}: checkpoint {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(
            f"{last}, which this run would resume, was trained with a different model "
            f"({detail}): keep the model settings to resume, or give another hydra.run.dir "
            "for a new run"
        )


def check_init_model(init_from: str | None, model: ModelConfig) -> None:
    """`init_from` an xfmr run (its directory, a .ckpt in it, or an xfmr-export .safetensors):
    the weights were trained as a model the config must describe, key for key, except what
    fine-tuning may change. A source that cannot be read is left to the run, which names what
    is missing."""
    if not init_from:
        return
    trained = _trained_model(Path(str(init_from)).expanduser())
    if trained is None:
        return
    # What a fine-tune may change (regularisation, depth, vocabulary, segments, a table's size)
    # is declared on the model's fields; every other key changes what a loaded tensor computes.
    differs = differences(trained, at_width_of(model, trained), ignore=fine_tune_keys())
    if differs:
        detail = ", ".join(f"model.{k}: trained {a!r} vs config {b!r}" for k, a, b in differs)
        raise UserError(
            f"init_from={str(init_from)!r} was trained as another model ({detail}): set these "
            "as it was trained, or start without init_from"
        )


def at_width_of(model: ModelConfig, other: ModelConfig) -> ModelConfig:
    """`model`, whose width the run chooses (`model.target_params`), at the width `other` was
    built with: the width is not the config's to differ in."""
    if model.target_params is None:
        return model
    try:
        return ModelConfig.from_settings(
            {**model.settings(), "d_model": other.d_model}, vocab_size=model.vocab_size
        )
    except ValueError:  # a width this config cannot take: it differs, as `model` says
        return model


def saved_width(run_dir: Path, model: ModelConfig) -> int | None:
    """The width the run in `run_dir` was given for `model.target_params`, if both ask for one."""
    if model.target_params is None:
        return None
    saved = _saved_model(run_dir)
    return saved.d_model if saved is not None and saved.target_params is not None else None


def _saved_model(run_dir: Path) -> ModelConfig | None:
    try:
        saved = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        return ModelConfig.from_saved(saved)
    except (yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError, OSError):
        return None  # no such run: nothing to compare


def _trained_model(source: Path) -> ModelConfig | None:
    """The model an xfmr init_from source was trained as, or None."""
    if source.suffix == SAFETENSORS_SUFFIX and source.is_file():
        try:
            return ModelConfig.from_dict(_exported_model_config(source))
        except (ValueError, TypeError, KeyError, OSError):
            return None
    whole_run = source.is_dir() and not is_sharded_checkpoint(source)
    return _saved_model(source if whole_run else source.parent.parent)


_SAFETENSORS_HEADER_LIMIT = 100_000_000  # the format's own limit on a header


def _exported_model_config(path: Path) -> dict[str, Any]:
    """The model config in an xfmr-export file's header: 8 bytes of length, then JSON whose
    `__metadata__.model_config` is itself JSON (the safetensors format; no torch needed)."""
    with path.open("rb") as file:
        length = int.from_bytes(file.read(8), "little")
        if length > _SAFETENSORS_HEADER_LIMIT:
            raise ValueError(f"a header of {length} bytes")
        header = json.loads(file.read(length))
    return json.loads(header["__metadata__"]["model_config"])
