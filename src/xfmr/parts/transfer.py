"""Starting a run from earlier weights: a Hugging Face checkpoint (`init_from=hf:PATH`) or an
xfmr run (`init_from=RUN_DIR`, a .ckpt, or a .safetensors from xfmr-export), e.g. BERT's
pretraining -> fine-tuning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from xfmr.errors import UserError
from xfmr.nn.config import ModelConfig
from xfmr.parts.sources import InitSource
from xfmr.run_dir.checkpoints import MODEL_PREFIX, read_checkpoint
from xfmr.run_dir.files import HF_CONFIG_FILE

log = logging.getLogger("xfmr")


@dataclass
class TransferReport:
    """Which tensors were loaded, which the checkpoint had but the model could not take
    (absent or another shape), and which the model has that the checkpoint did not give."""

    loaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"loaded": len(self.loaded), "skipped": self.skipped, "new": self.new}


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


def pretrained_model_config(hf_dir: Path, model: ModelConfig, block_size: int | None) -> Any:
    """The HF checkpoint's model, with this run's dropout (`model`: the run's configured one),
    whose learned positions must cover `block_size` (the data's, if it cuts token blocks)."""
    from xfmr.interop.hf import hf_model_config

    if model.vocab_multiple != 1:  # the checkpoint's rows are its vocab_size, padded or not
        raise UserError(
            f"model.vocab_multiple={model.vocab_multiple} does not apply with "
            f"init_from=hf:{hf_dir}, whose {HF_CONFIG_FILE} decides the vocabulary's rows: "
            "leave it at 1"
        )
    try:
        config = hf_model_config(hf_dir, dropout=model.dropout, attn_dropout=model.attn_dropout)
    except ValueError as e:
        raise UserError(f"init_from=hf:{hf_dir}: {e}") from None
    limit = config.pos.max_positions if config.pos.name == "learned" else None
    if limit is not None and (block_size or 0) > limit:
        raise UserError(
            f"data.block_size={block_size} is longer than the {limit} learned positions "
            f"of init_from=hf:{hf_dir}"
        )
    return config
