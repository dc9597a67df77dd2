"""One way to load a trained run, used by every entry point that reads one: the resolved config,
and the parts built from it as training builds them (`xfmr.parts`), with the weights of a
chosen checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from xfmr.config import RunConfig
from xfmr.errors import UserError
from xfmr.nn import ModelConfig
from xfmr.objectives.contract import Objective
from xfmr.parts.build import Plan, build_parts
from xfmr.run_dir.checkpoints import MODEL_PREFIX, read_checkpoint
from xfmr.run_dir.files import RunFiles, locate_run
from xfmr.text.tokenizers import TextTokenizer


@dataclass
class LoadedRun:
    """A trained run ready for use.

    Args:
        files: where the config, tokenizer and checkpoint were read from.
        config: the run's resolved config (config.yaml).
        tokenizer: the run's tokenizer.
        objective: the run's objective, bound to the tokenizer (its special token ids).
        model: the model in eval mode with the checkpoint's weights, on `device`.
        model_config: the model's shape, as the checkpoint saved it.
        global_step: the optimizer step the checkpoint was saved at (None if not recorded).
    """

    files: RunFiles
    config: RunConfig
    tokenizer: TextTokenizer
    objective: Objective
    model: nn.Module
    model_config: ModelConfig
    global_step: int | None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def load_run(
    run_dir: str | Path, *, checkpoint: str | Path | None = None, device: str = "cpu"
) -> LoadedRun:
    """Load `run_dir` with the weights of `checkpoint` (best, last, averaged, a path; None:
    best, else last). Every missing or unreadable part is a UserError naming the path."""
    files = locate_run(run_dir, checkpoint)
    config = RunConfig.read(files.config)
    state = read_checkpoint(files.checkpoint)
    parts = build_parts(plan_finished(config, files.run_dir, state))
    load_weights(parts.model, state["state_dict"], files.checkpoint)
    parts.model.to(resolve_device(device)).eval()
    return LoadedRun(
        files=files,
        config=config,
        tokenizer=parts.tokenizer,
        objective=parts.objective,
        model=parts.model,
        model_config=parts.model_config,
        global_step=state.get("global_step"),
    )


def plan_finished(config: RunConfig, run_dir: Path, checkpoint: dict[str, Any]) -> Plan:
    """The plan of a finished run: its config, and the model its checkpoint was saved from."""
    return Plan(
        model=config.model,
        objective=config.objective,
        tokenizer=config.tokenizer,
        data=config.data,
        run_dir=run_dir,
        cache_dir=config.paths.cache_dir,
        finished=True,
        model_config=ModelConfig.from_dict(checkpoint["hyper_parameters"]["model_config"]),
    )


def load_weights(model: nn.Module, state_dict: dict[str, torch.Tensor], path: Path) -> None:
    """The checkpoint's `model.*` tensors into `model`; any mismatch is a UserError."""
    weights = {
        k.removeprefix(MODEL_PREFIX): v for k, v in state_dict.items() if k.startswith(MODEL_PREFIX)
    }
    try:
        result = model.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # a tensor of another shape
        detail = str(e).split("\n\t")[1:2] or [str(e)]
        raise UserError(
            f"checkpoint {str(path)!r} does not fit the model its config builds ({detail[0]})"
        ) from None
    if result.missing_keys or result.unexpected_keys:
        raise UserError(
            f"checkpoint {str(path)!r} does not fit the model its config builds (missing: "
            f"{_few(result.missing_keys)}; unexpected: {_few(result.unexpected_keys)})"
        )


def _few(names: list[str], limit: int = 5) -> str:
    if not names:
        return "none"
    return ", ".join(names[:limit]) + (
        f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    )


def resolve_device(device: str) -> torch.device:
    """`auto` is CUDA when available, else CPU; a device torch cannot use is a UserError."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise UserError(f"device={device!r} is not a torch device: use cpu, cuda or auto") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={device!r}: CUDA is not available here; use device=cpu")
    return resolved
