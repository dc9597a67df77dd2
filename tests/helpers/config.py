"""The real config tree composed in process, for a test that calls `run_training(config)` itself."""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any

from helpers.runs import CORPUS, PEAK


def compose_config(tmp_path: Path, overrides: list[str]):
    """The real config tree composed, read into a `RunConfig` and checked as the CLI does
    (trainer.precision=auto chosen for this machine, ...), for an in-process
    `run_training(config)`; outputs under tmp_path; on a tiny text corpus the test writes
    unless `data=` is given. A config the CLI refuses raises its UserError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from xfmr.config.make import run_config
    from xfmr.paths import config_dir

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    own_data = any(o.startswith("data=") for o in overrides)
    text_data = [] if own_data else ["data=text", f"data.path={corpus}", "data.block_size=16"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                *text_data,
                "data.batch_size=4",
                "trainer.max_steps=2",
                "schedule.warmup_steps=1",  # a warm-up longer than the run is refused
                "trainer.val_check_interval=2",
                "trainer.limit_val_batches=1",
                "trainer.num_sanity_val_steps=0",
                "trainer.enable_progress_bar=false",
                "callbacks.progress_bar=null",
                "logger=none",
                PEAK,
                f"paths.root_dir={tmp_path}",
                f"paths.output_dir={tmp_path / 'run'}",
                *overrides,
            ],
        )
    return run_config(OmegaConf.to_container(cfg, resolve=True))


def signature_defaults(target: Any) -> dict[str, Any]:
    """{parameter: default} of a function or class; a class whose constructor takes **kwargs
    hands them to its bases, whose parameters count too (the nearest first)."""
    owners = [target]
    if inspect.isclass(target):
        owners = [c for c in target.__mro__ if "__init__" in vars(c) and c is not object]
    defaults: dict[str, Any] = {}
    for owner in owners:
        parameters = inspect.signature(owner).parameters.values()
        for p in parameters:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                defaults.setdefault(p.name, p.default)
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return defaults


def checked(cfg: Any):
    """A composed config (a DictConfig or a dict) read into a `RunConfig` as the CLI reads it:
    the checks, then what the run chooses itself; a refusal raises its UserError."""
    from omegaconf import OmegaConf

    from xfmr.config import RunConfig
    from xfmr.config.make import run_config

    if isinstance(cfg, RunConfig):  # compose_config's: checked already
        return cfg
    if not OmegaConf.is_config(cfg):
        return run_config(cfg)
    raw = OmegaConf.to_container(cfg, resolve=False)
    raw.pop("hydra", None)  # composed with Hydra's own config: its paths stand in a folder here
    where = tempfile.mkdtemp(prefix="xfmr-checked-")
    for key, value in (raw.get("paths") or {}).items():
        if isinstance(value, str) and "${hydra:" in value:
            value = value.replace("${hydra:runtime.cwd}", where)
            raw["paths"][key] = value.replace("${hydra:runtime.output_dir}", f"{where}/run")
    return run_config(OmegaConf.to_container(OmegaConf.create(raw), resolve=True))


def model_of(cfg: Any, vocab_size: int):
    """The model a composed config (DictConfig) describes, at `vocab_size`; a model key it
    refuses raises its UserError."""
    from omegaconf import OmegaConf

    from xfmr.config import RunConfig
    from xfmr.config.run import read_model

    if isinstance(cfg, RunConfig):
        return cfg.model.with_vocab(vocab_size)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    legacy = {"pos": OmegaConf.to_container(cfg.pos, resolve=True)} if "pos" in cfg else {}
    return read_model({"model": model, **legacy}).with_vocab(vocab_size)
