"""`xfmr-train`: compose an experiment from config groups and train it.

Only Hydra and OmegaConf load before the config is checked, so `--help` and mistakes are fast.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from xfmr.checks import check_config
from xfmr.cli.common import fail, print_config_tree
from xfmr.errors import UserError
from xfmr.paths import config_dir

PROG = "xfmr-train"
_TREE_ORDER = (
    "experiment",
    "model",
    "pos",
    "data",
    "tokenizer",
    "objective",
    "optim",
    "schedule",
    "trainer",
)
log = logging.getLogger("xfmr")


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")
def _train_app(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    # Unresolved: an override may itself be an interpolation ("a=${b}").
    overrides = list(OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False))
    try:
        check_config(cfg)
        name_wandb_run(cfg, hydra_cfg)
        resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        if cfg.get("print_config", True):
            print_config_tree(resolved, _TREE_ORDER)
        results = _run(resolved, overrides)
    except UserError as e:
        fail(PROG, str(e))
    except OmegaConfBaseException as e:  # an interpolation or type error in the composed config
        fail(PROG, f"config: {e}".split("\n    full_key")[0])
    log.info("run directory: %s", resolved.paths.output_dir)
    metric = cfg.get("optimized_metric")
    return results["metrics"].get(metric) if metric and results else None


def _run(cfg: DictConfig, overrides: list[str]) -> dict | None:
    """Import the heavy parts only now; turn their complaints about a person's input into UserErrors."""
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from xfmr.training.run import train

    try:
        return train(cfg, overrides=overrides)
    except MisconfigurationException as e:
        raise UserError(f"trainer: {e}") from None
    except InstantiationException as e:
        raise UserError(str(e).strip()) from None


def name_wandb_run(cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """One wandb run per job, grouped by sweep: group = the sweep directory, name = its overrides."""
    wandb_cfg = (cfg.get("logger") or {}).get("wandb")
    if wandb_cfg is None:
        return
    from hydra.types import RunMode

    with open_dict(cfg):
        if hydra_cfg.mode == RunMode.MULTIRUN:
            wandb_cfg.group = wandb_cfg.get("group") or str(hydra_cfg.sweep.dir)
            wandb_cfg.name = wandb_cfg.get("name") or (
                hydra_cfg.job.override_dirname or f"job{hydra_cfg.job.num}"
            )


# Groups of the shared config tree that the other entry points compose, not xfmr-train.
_OTHER_TOOLS_GROUPS = {
    "generation": (
        "generation is for xfmr-generate, xfmr-eval and xfmr-attention (e.g. xfmr-eval "
        "run_dir=RUN generation=beam); xfmr-train's closing sample is set by "
        "callbacks.text_sample.* (temperature, top_k, max_new_tokens)"
    ),
}


def check_group_choices(argv: list[str], conf: Path) -> None:
    """`group=choice` arguments name an existing choice; Hydra's own message buries the list."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if key.split(".")[0] in _OTHER_TOOLS_GROUPS:
            fail(PROG, _OTHER_TOOLS_GROUPS[key.split(".")[0]])
        group = conf / key
        if not sep or "/" in key or key == "hydra" or not group.is_dir():
            continue
        choices = sorted(p.stem for p in group.glob("*.yaml"))
        sweep = (
            value.split(",")
            if "," in value and not value.startswith(("[", "choice(", "range("))
            else [value]
        )
        for choice in sweep:
            if choice not in choices and choice != "null":
                fail(
                    PROG,
                    f"{key}={choice!r} is not a choice of the `{key}` group; valid: {', '.join(choices)}",
                )


def main() -> None:
    check_group_choices(sys.argv[1:], config_dir())
    _train_app()


if __name__ == "__main__":
    main()
