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


def read_exported(path: Path, name: str) -> dict[str, Any]:
    """An xfmr-export file as `read_checkpoint` returns a checkpoint: `state_dict` (tied names
    sharing one tensor again), `hyper_parameters.model_config` and `global_step`. A file that is
    not one is a UserError naming it (`name`)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata() or {}
            tensors = {key: file.get_tensor(key) for key in file.keys()}
    except Exception as e:  # safetensors' own error type for any damaged header
        raise UserError(f"{name} is not a readable .safetensors file ({e})") from None
    config, tied, step = _xfmr_metadata(metadata, name)
    missing = sorted(set(tied.values()) - set(tensors))
    if missing:
        raise UserError(f"{name} is not an xfmr export: it ties names to absent tensors {missing}")
    tensors.update({alias: tensors[target] for alias, target in tied.items()})
    state_dict = {MODEL_PREFIX + key: tensor for key, tensor in tensors.items()}
    return {
        "state_dict": state_dict,
        "hyper_parameters": {"model_config": config},
        "global_step": step,
    }


def _xfmr_metadata(metadata: dict[str, str], name: str) -> tuple[dict, dict, int | None]:
    try:
        config = json.loads(metadata["model_config"])
        tied = json.loads(metadata.get("tied", "{}"))
        step = json.loads(metadata.get("global_step", "null"))
    except (KeyError, json.JSONDecodeError):
        config = tied = step = None
    if not isinstance(config, dict) or not isinstance(tied, dict):
        raise UserError(
            f"{name} is not an xfmr export: its metadata has no model_config and tied as JSON "
            "objects (xfmr-export writes them)"
        )
    return config, tied, step if isinstance(step, int) else None
