"""One way to load a trained run, used by every entry point that reads one: the resolved config,
the tokenizer, the objective bound to it, and the model built as `XfmrModule` builds it with
the weights of a chosen checkpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from xfmr.errors import UserError
from xfmr.nn import ModelConfig
from xfmr.objectives.contract import Objective
from xfmr.run_dir.checkpoints import MODEL_PREFIX, read_checkpoint
from xfmr.run_dir.files import LABELS_FILE, RunFiles, locate_run, read_labels
from xfmr.text.tokenizers import TextTokenizer

log = logging.getLogger("xfmr")


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
    config: DictConfig
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
    config = OmegaConf.load(files.config)
    tokenizer = TextTokenizer.load(files.tokenizer)
    state = read_checkpoint(files.checkpoint)
    objective = bind_objective(config, tokenizer, files.run_dir)
    model_config = ModelConfig.from_dict(state["hyper_parameters"]["model_config"])
    model = build_run_model(objective, model_config)
    load_weights(model, state["state_dict"], files.checkpoint)
    model.to(resolve_device(device)).eval()
    return LoadedRun(
        files=files,
        config=config,
        tokenizer=tokenizer,
        objective=objective,
        model=model,
        model_config=model_config,
        global_step=state.get("global_step"),
    )


def bind_objective(config: DictConfig, tokenizer: TextTokenizer, run_dir: Path) -> Any:
    """The run's objective, bound to its tokenizer and label set as `train` binds them."""
    objective = instantiate(config.objective)
    objective.bind(tokenizer)
    if objective.uses_labels:  # classification, tagging
        objective.bind_labels(trained_labels(config, run_dir))
    return objective


def trained_labels(config: DictConfig, run_dir: Path) -> list[str]:
    """The labels the run was trained on, from its labels.json. A run written before runs kept
    them is given its training data's labels again, with a warning: they are right only if
    that data has not changed since."""
    labels = read_labels(run_dir)
    if labels is not None:
        return labels
    log.warning(
        "%s has no %s (written by an older xfmr-train): reading the label set from the "
        "training data again, which is right only if the data has not changed since",
        run_dir,
        LABELS_FILE,
    )
    return instantiate(config.data).label_names()


def build_run_model(objective: Any, model_config: ModelConfig) -> nn.Module:
    """The model as XfmrModule builds it: the objective's own builder (a task head) if it has
    one, else `xfmr.nn.build_model`."""
    return objective.build_model(model_config)


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
