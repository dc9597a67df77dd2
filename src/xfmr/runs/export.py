"""A run's model weights as a .safetensors file for sharing (xfmr-export): a JSON header and raw
tensors, nothing to unpickle, read by Hugging Face's `safetensors` without xfmr.

The tensors keep the model's own names (`backbone.tok_emb.weight`, no `model.` prefix). The
metadata holds `model_config` (JSON of xfmr.nn.ModelConfig's fields), `tied` (JSON: name -> the
name whose tensor it is) and the checkpoint's `global_step`. safetensors refuses tensors that
share memory, so a tied LM head is written once, under the name that comes first (the
embedding's), and tied again on reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from xfmr.errors import UserError
from xfmr.files import atomic_path, atomic_write_bytes
from xfmr.run_dir.checkpoints import MODEL_PREFIX, SAFETENSORS_SUFFIX, read_checkpoint
from xfmr.run_dir.files import TOKENIZER_FILE, RunFiles

METADATA_FORMAT = "pt"  # Hugging Face's loaders check `format` before reading the tensors


def export_weights(checkpoint: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write `checkpoint`'s model weights (as `read_checkpoint` returns it) to `out` atomically.
    Returns how many tensors were written and which names are tied to another."""
    from safetensors.torch import save_file

    weights = {
        k.removeprefix(MODEL_PREFIX): v
        for k, v in checkpoint["state_dict"].items()
        if k.startswith(MODEL_PREFIX)
    }
    tied = tied_names(weights)
    tensors = {k: v.contiguous() for k, v in weights.items() if k not in tied}
    metadata = {
        "format": METADATA_FORMAT,
        "model_config": json.dumps(checkpoint["hyper_parameters"]["model_config"]),
        "tied": json.dumps(tied),
        "global_step": json.dumps(checkpoint.get("global_step")),
    }
    with atomic_path(out) as temporary:  # a reader never sees half a file
        save_file(tensors, temporary, metadata=metadata)
    return {"tensors": len(tensors), "tied": tied}


def export_run(files: RunFiles, out: Path) -> dict[str, Any]:
    """Export the weights of `files.checkpoint` to `out`, with the run's tokenizer.json beside
    it (token ids mean nothing without it); a different tokenizer.json there is a UserError."""
    if out.suffix != SAFETENSORS_SUFFIX:
        raise UserError(f"out={str(out)!r} must end in {SAFETENSORS_SUFFIX}")
    beside = out.parent / TOKENIZER_FILE
    if beside.is_file() and beside.read_bytes() != files.tokenizer.read_bytes():
        raise UserError(
            f"out={str(out)!r}: {beside} is another tokenizer than the run's, and the weights "
            "need theirs beside them; choose another directory"
        )
    result = export_weights(read_checkpoint(files.checkpoint, mmap=True), out)
    if not beside.is_file():
        atomic_write_bytes(beside, files.tokenizer.read_bytes())
    return {**result, "out": str(out), "tokenizer": str(beside)}


def tied_names(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    """Each name whose tensor is the same memory as an earlier name's: name -> earlier name."""
    first: dict[tuple, str] = {}
    tied = {}
    for name, tensor in weights.items():
        where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape)
        if where in first:
            tied[name] = first[where]
        else:
            first[where] = name
    return tied
