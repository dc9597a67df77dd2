"""Reading a checkpoint, the one way every entry point does it (resume, `init_from`, xfmr-eval,
xfmr-generate, xfmr-average, xfmr-attention, xfmr-export).

A .ckpt is a pickle, and unpickling calls whatever functions the file names. `torch.load(...,
weights_only=True)` rebuilds only tensors, numbers, strings and containers, which is all an xfmr
checkpoint holds (the model config as a plain dict, callback states as dicts of numbers and
tensors), so a crafted file is refused before anything in it runs. Nothing is allow-listed on
top: a file that needs more was not written by xfmr-train. Lightning's own load on resume is
held to the same (`trainer.fit(..., weights_only=True)`).

A .safetensors file (xfmr-export) is a JSON header and raw tensors: nothing in it can run.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from xfmr.errors import UserError

MODEL_PREFIX = "model."  # XfmrModule keeps the model as `self.model`
SAFETENSORS_SUFFIX = ".safetensors"


def read_checkpoint(path: Path, *, key: str = "checkpoint", mmap: bool = False) -> dict[str, Any]:
    """The checkpoint at `path`: a dict with `state_dict` and `hyper_parameters.model_config`.

    A .safetensors export reads as a checkpoint with the weights and no training state. Any other
    file is one UserError that names it as `key=path`. `mmap` maps the tensors instead of reading
    them (cheap when only a few are needed)."""
    name = f"{key}={str(path)!r}"
    if Path(path).suffix == SAFETENSORS_SUFFIX:
        from xfmr.runs.export import read_exported

        return read_exported(Path(path), name)
    state = safe_load(Path(path), name, mmap=mmap)
    hparams = state.get("hyper_parameters") if isinstance(state, dict) else None
    config = hparams.get("model_config") if isinstance(hparams, dict) else None
    if not isinstance(config, dict) or not isinstance(state.get("state_dict"), dict):
        raise UserError(
            f"{name} is not an xfmr checkpoint (it has no state_dict and "
            "hyper_parameters.model_config): give a .ckpt written by xfmr-train or xfmr-average"
        )
    return state


def safe_load(path: Path, name: str, *, mmap: bool = False) -> Any:
    """`torch.load` of a file that may come from anyone: only tensors, numbers, strings and
    containers, else a UserError naming the file (`name`) and what it asked for."""
    # torch.save writes a zip archive; a bare pickle is not one of ours, so it is never unpickled.
    if not zipfile.is_zipfile(path):
        raise UserError(f"{name} is not a readable checkpoint (not a zip archive from torch.save)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        raise UserError(_refusal(name, str(e))) from None
    except Exception as e:  # a damaged archive: the message matters, not the type
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise UserError(
            f"{name} is not a readable checkpoint ({type(e).__name__}: {detail})"
        ) from None


def _refusal(name: str, message: str) -> str:
    """torch's several-paragraph refusal as one line: the global the file asked for, if named."""
    found = re.search(r"GLOBAL ([\w.]+)", message)
    asked = f"it refers to {found.group(1)}" if found else "it holds pickle instructions"
    return (
        f"{name} cannot be loaded safely: {asked}, and xfmr loads only tensors, numbers, strings "
        "and containers (torch.load weights_only=True) so that no file can run code; it is not a "
        "checkpoint written by this xfmr (a crafted file, another program's, or an older version's)"
    )
