"""Starting a run from earlier weights: a Hugging Face checkpoint (`init_from=hf:PATH`) or an
xfmr run (`init_from=RUN_DIR`, a .ckpt, or a .safetensors from xfmr-export), e.g. BERT's
pretraining -> fine-tuning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from torch import nn

from xfmr.checks import check_init_from
from xfmr.errors import UserError
from xfmr.run_dir.checkpoints import MODEL_PREFIX, SAFETENSORS_SUFFIX, read_checkpoint
from xfmr.run_dir.files import (
    BEST_CHECKPOINT,
    CHECKPOINT_DIR,
    HF_CONFIG_FILE,
    HF_TOKENIZER_FILE,
    LAST_CHECKPOINT,
    TOKENIZER_FILE,
    is_checkpoint,
    is_sharded_checkpoint,
)

log = logging.getLogger("xfmr")


@dataclass
class InitSource:
    kind: str  # "hf" or "run"
    path: Path  # the HF directory, the .ckpt or the .safetensors file
    tokenizer: Path | None  # the vocabulary the weights were trained with


@dataclass
class TransferReport:
    """Which tensors were loaded, which the checkpoint had but the model could not take
    (absent or another shape), and which the model has that the checkpoint did not give."""

    loaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"loaded": len(self.loaded), "skipped": self.skipped, "new": self.new}


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


def initialise_from(model: nn.Module, source: InitSource) -> TransferReport:
    if source.kind == "hf":
        from xfmr.interop.hf import load_into

        try:
            transfer = load_into(model, source.path)
        except ValueError as e:
            raise UserError(f"init_from=hf:{source.path}: {e}") from None
        report = TransferReport(transfer.loaded, transfer.skipped, transfer.new)
        log.info(
            "init_from hf:%s: loaded %d tensors; skipped %s; new %s",
            source.path,
            len(report.loaded),
            report.skipped or "none",
            report.new or "none",
        )
        return report
    report = load_matching(model, source.path)
    log.info(
        "init_from %s: loaded %d tensors; skipped %s; new %s",
        source.path,
        len(report.loaded),
        report.skipped or "none",
        report.new or "none",
    )
    if not report.loaded:
        raise UserError(
            f"init_from={str(source.path)!r}: no tensor matches this model by name and shape"
        )
    return report


def load_matching(model: nn.Module, checkpoint: Path) -> TransferReport:
    """Copy each tensor of an xfmr checkpoint (or xfmr-export .safetensors) whose name and
    shape the model shares."""
    state = read_checkpoint(checkpoint, key="init_from")["state_dict"]
    theirs = {
        k.removeprefix(MODEL_PREFIX): v for k, v in state.items() if k.startswith(MODEL_PREFIX)
    }
    ours = model.state_dict()
    report = TransferReport()
    for name, tensor in theirs.items():
        if name in ours and ours[name].shape == tensor.shape:
            report.loaded.append(name)
        else:
            report.skipped.append(name)
    report.new = [n for n in ours if n not in theirs]
    model.load_state_dict({n: theirs[n] for n in report.loaded}, strict=False)
    return report


def freeze_backbone(model: nn.Module) -> None:
    """Fine-tune only what sits outside `model.backbone` (the task head)."""
    backbone = getattr(model, "backbone", None)
    if backbone is None:
        raise UserError(f"finetune.freeze_backbone=true: {type(model).__name__} has no backbone")
    for param in backbone.parameters():
        param.requires_grad_(False)
    if not any(p.requires_grad for p in model.parameters()):
        raise UserError(
            "finetune.freeze_backbone=true leaves nothing to train: the head is tied to the "
            "backbone's embedding (model.tie_embeddings=false gives it weights of its own)"
        )


def pretrained_model_config(cfg: DictConfig, hf_dir: Path) -> Any:
    """The HF checkpoint's model, with this run's dropout."""
    from xfmr.interop.hf import hf_model_config

    try:
        config = hf_model_config(
            hf_dir, dropout=cfg.model.dropout, attn_dropout=cfg.model.attn_dropout
        )
    except ValueError as e:
        raise UserError(f"init_from=hf:{hf_dir}: {e}") from None
    limit = config.pos.max_positions if config.pos.name == "learned" else None
    if limit is not None and cfg.data.get("block_size", 0) > limit:
        raise UserError(
            f"data.block_size={cfg.data.block_size} is longer than the {limit} learned positions "
            f"of init_from=hf:{hf_dir}"
        )
    return config
