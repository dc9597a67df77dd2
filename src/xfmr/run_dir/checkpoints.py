"""Reading a checkpoint, the one way every entry point does it (resume, `init_from`, xfmr-eval,
xfmr-generate, xfmr-average, xfmr-attention, xfmr-export).

A .ckpt is a pickle, and unpickling calls whatever functions the file names. `torch.load(...,
weights_only=True)` rebuilds only tensors, numbers, strings and containers, which is all an xfmr
checkpoint holds (the model config as a plain dict, callback states as dicts of numbers and
tensors), so a crafted file is refused before anything in it runs. Nothing is allow-listed on
top: a file that needs more was not written by xfmr-train. Lightning's own load on resume is
held to the same (`trainer.fit(..., weights_only=True)`).

A .safetensors file (xfmr-export) is a JSON header and raw tensors: nothing in it can run.

A sharded checkpoint (trainer=fsdp) is a folder: torch.distributed.checkpoint's shards, one per
rank, and the loop's state in meta.pt. It reads whole, on one process whatever the world size
that wrote it, as torch's own consolidation does (`format_utils`); its non-tensor entries (the
optimizer's settings), which torch unpickles freely, are held to weights_only as well.
"""

from __future__ import annotations

import json
import pickle
import re
import zipfile
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

from xfmr.errors import UserError
from xfmr.run_dir.files import (
    SAFETENSORS_SUFFIX,
    SHARDED_STATE_FILE,
    SHARDS_INDEX_FILE,
    is_sharded_checkpoint,
)

MODEL_PREFIX = "model."  # XfmrModule keeps the model as `self.model`
# In a sharded checkpoint's state file: name -> the name whose parameter it is (a tied LM head),
# as the shards hold each name apart; they are tied again on reading.
TIED_KEY = "tied_parameters"


def read_checkpoint(path: Path, *, key: str = "checkpoint", mmap: bool = False) -> dict[str, Any]:
    """The checkpoint at `path`: a dict with `state_dict` and `hyper_parameters.model_config`.

    A .safetensors export reads as a checkpoint with the weights and no training state. Any other
    file is one UserError that names it as `key=path`. `mmap` maps the tensors instead of reading
    them (cheap when only a few are needed)."""
    name = f"{key}={str(path)!r}"
    if Path(path).suffix == SAFETENSORS_SUFFIX:
        return read_exported(Path(path), name)
    if Path(path).is_dir():
        state = read_sharded(Path(path), name)
    else:
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


def read_sharded(path: Path, name: str) -> dict[str, Any]:
    """A sharded checkpoint's folder as one checkpoint: the loop's state (meta.pt) with the
    whole `state_dict` gathered from every rank's shard. The optimizer's tensors stay on disk
    (no entry point that reads a run needs them; a resumed run loads its own shards), but its
    settings are read, so a file that would run code is refused here, before a resume."""
    if not is_sharded_checkpoint(path):
        raise UserError(
            f"{name} is a folder, but not a sharded checkpoint (trainer=fsdp writes "
            f"{SHARDED_STATE_FILE} and the shards' {SHARDS_INDEX_FILE} in one): give a checkpoint "
            "written by "
            "xfmr-train"
        )
    state = safe_load(path / SHARDED_STATE_FILE, name)
    if not isinstance(state, dict):
        raise UserError(f"{name} is not an xfmr checkpoint ({SHARDED_STATE_FILE} is not a dict)")
    try:
        state.update(_load_shards(path, name))
    except UserError:
        raise
    except Exception as e:  # a damaged or partial folder: torch's message matters, not its type
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise UserError(
            f"{name} is not a readable sharded checkpoint ({type(e).__name__}: {detail})"
        ) from None
    state.pop("optimizer_0", None)
    weights = state.get("state_dict", {})
    for alias, target in (state.pop(TIED_KEY, None) or {}).items():
        if alias in weights and target in weights:
            weights[alias] = weights[target]
    return state


def _load_shards(path: Path, name: str) -> dict[str, Any]:
    """The model's tensors and every non-tensor entry of a torch.distributed.checkpoint folder,
    whole, in this process (no process group), as `format_utils.dcp_to_torch_save` reads one."""
    import warnings

    from torch.distributed.checkpoint import FileSystemReader, load
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    reader = FileSystemReader(str(path))
    index = reader.read_metadata()
    settings = {
        k for k, v in index.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)
    }
    planner = _safe_planner(keys={"state_dict", *settings}, name=name)
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
        warnings.simplefilter("ignore", UserWarning)
        load({}, storage_reader=reader, planner=planner, no_dist=True)
    return planner.original_state_dict


def _safe_planner(*, keys: set[str], name: str) -> Any:
    """A planner that reads a checkpoint without a model, building the state dict from the
    folder's metadata (as torch's `format_utils.dcp_to_torch_save` does with a planner of its
    own, internal to torch), for the entries under `keys`; its non-tensor entries unpickled
    with weights_only=True (torch's planner unpickles them with weights_only=False)."""
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    class SafePlanner(DefaultLoadPlanner):
        def set_up_planner(self, state_dict: Any, metadata: Any = None, is_coordinator=False):
            for key, value in metadata.state_dict_metadata.items():
                path = (metadata.planner_data or {}).get(key)
                if key not in keys and not (path and str(path[0]) in keys):
                    continue
                if isinstance(value, TensorStorageMetadata):
                    value = torch.empty(value.size, dtype=value.properties.dtype)
                if path is not None:
                    _set_nested(state_dict, path, value)
                else:
                    state_dict[key] = value
            super().set_up_planner(state_dict, metadata, is_coordinator)

        def load_bytes(self, read_item: Any, value: Any) -> None:
            try:
                obj = torch.load(value, weights_only=True)
            except pickle.UnpicklingError as e:
                raise UserError(_refusal(name, str(e))) from None
            fqn = read_item.dest_index.fqn
            if self.flatten_state_dict:
                _set_nested(self.original_state_dict, self.mappings[fqn], obj)
            else:
                self.state_dict[fqn] = obj

    return SafePlanner()


# torch's planners put an entry of a flattened state dict back into the nested one with
# torch.distributed.checkpoint._traverse.set_element, of a private module that may change or go
# without notice; these are its steps as of torch 2.13, so SafePlanner puts what it loads where
# torch's own planner would.
def _set_nested(root: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """`root[path[0]][path[1]]...[path[-1]] = value`, making on the way a dict for each str key
    and a list for each int key that is missing, and lengthening lists with None to an index."""
    container: Any = root
    for key, next_key in pairwise(path):
        missing = {} if type(next_key) is str else []
        if isinstance(container, Mapping):
            container = container.setdefault(key, missing)
        else:
            _lengthen(container, key)
            if container[key] is None:
                container[key] = missing
            container = container[key]
    if type(path[-1]) is int:
        _lengthen(container, path[-1])
    container[path[-1]] = value


def _lengthen(items: list[Any], index: int) -> None:
    while len(items) <= index:
        items.append(None)
