"""`xfmr-train`: compose an experiment from config groups and train it.

Only Hydra and OmegaConf load before the config is checked, so `--help` and mistakes are fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from xfmr.checks import check_config
from xfmr.cli.common import fail, print_config_tree
from xfmr.cli.run_dir import discard_unused_run_dir
from xfmr.errors import RunFailed, RunInterrupted, UserError
from xfmr.paths import config_dir
from xfmr.schema import SCHEMA_GROUP, SCHEMA_NAME

PROG = "xfmr-train"
_TREE_ORDER = (
    "model",
    "data",
    "tokenizer",
    "objective",
    "optim",
    "schedule",
    "trainer",
)
log = logging.getLogger("xfmr")


def train_job(cfg: DictConfig) -> float | None:
    """One Hydra job: check, train, and return the optimized metric. A module-level function,
    so xfmr's launcher can send it to the child process a sweep's job runs in."""
    from hydra.core.hydra_config import HydraConfig

    from xfmr.api.training import fit_checked

    hydra_cfg = HydraConfig.get()
    # Unresolved: an override may itself be an interpolation ("a=${b}").
    overrides = list(OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False))
    try:
        check_config(cfg)
        name_sweep_runs(cfg, hydra_cfg)
        resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        attach_trial(resolved, hydra_cfg)
        if cfg.get("print_config", True):
            print_config_tree(resolved, _TREE_ORDER)
        results = fit_checked(resolved, overrides)
    except UserError as e:
        discard_unused_run_dir()
        fail(PROG, str(e))
    except RunFailed as e:  # results.json says so too; the exit code tells a script or sweep
        fail(PROG, str(e), code=1)
    except RunInterrupted as e:  # 130: the shell's code for a job stopped by a signal
        fail(PROG, str(e), code=130)
    except OmegaConfBaseException as e:  # an interpolation or type error in the composed config
        discard_unused_run_dir()
        fail(PROG, f"config: {e}".split("\n    full_key")[0])
    log.info("run directory: %s", resolved.paths.output_dir)
    metric = cfg.get("optimized_metric")
    return results["metrics"].get(metric) if metric and results else None


_train_app = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")(
    train_job
)


def attach_trial(cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """In a search, the job's `trial` section names the study trial it reports to (saved in
    the run's config, so DDP workers and a reader of the run see it too)."""
    from xfmr.sweeps.trial import trial_of_job

    trial = trial_of_job(hydra_cfg, metric=str(cfg.get("optimized_metric") or "val/loss"))
    if trial is not None:
        with open_dict(cfg):
            cfg.trial = trial


def name_sweep_runs(cfg: DictConfig, hydra_cfg: DictConfig) -> None:
    """In a multirun each job is one run of its sweep in every dashboard: a wandb run in the
    sweep's group, an MLflow run in the sweep's experiment tagged with the sweep and job number;
    named after the job's overrides."""
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN:
        return
    from xfmr.sweeps.names import sweep_name

    sweep = sweep_name(hydra_cfg)
    job_name = hydra_cfg.job.override_dirname or f"job{hydra_cfg.job.num}"
    loggers = cfg.get("logger") or {}
    with open_dict(cfg):
        if loggers.get("wandb") is not None:
            loggers.wandb.group = loggers.wandb.get("group") or sweep
            loggers.wandb.name = loggers.wandb.get("name") or job_name
        if loggers.get("mlflow") is not None:
            loggers.mlflow.experiment_name = sweep
            loggers.mlflow.run_name = loggers.mlflow.get("run_name") or job_name
            loggers.mlflow.tags = {
                **(loggers.mlflow.get("tags") or {}),
                "xfmr.sweep": sweep,
                "xfmr.job": str(hydra_cfg.job.num),
            }


def check_group_choices(argv: list[str], conf: Path) -> None:
    """Every `group=value` argument (each choice of a sweep) names a config of its group in
    `conf` or --config-dir, else fail in one line listing the choices."""
    from xfmr.api.choices import choice_problem

    parsed = _hydra_args(argv)
    if parsed is None:
        return
    args, stray = parsed
    # Words after a flag (`size=tiny -m pos=a,b`) Hydra refuses as unrecognized arguments; a
    # misspelt choice among them is still worth naming.
    words = [*args.overrides, *(word for word in stray if not word.startswith("-"))]
    problem = choice_problem(words, _config_dirs(args, conf))
    if problem:
        fail(PROG, problem)


def _hydra_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]] | None:
    """`argv` read by Hydra's own command-line parser, and the words it does not recognize;
    None if it refuses them (Hydra will say why when it reads them again)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        return parser.parse_known_args(argv)
    except argparse.ArgumentError:
        return None


def _config_dirs(args: argparse.Namespace, conf: Path) -> list[Path]:
    """Where Hydra will look for group choices: `conf` and --config-dir (Hydra keeps the last
    one given). Empty when that is not known before Hydra starts: the primary config directory
    replaced (--config-path) or --config-dir missing (an overridden search path:
    `choice_problem`)."""
    if args.config_path is not None:
        return []
    if args.config_dir is None:
        return [conf]
    extra = Path(args.config_dir).absolute()
    return [conf, extra] if extra.is_dir() else []


def help_text(argv: list[str], conf: Path) -> str | None:
    """What `xfmr-train --help` prints, written from the config files; None where only Hydra can
    say (other help flags or templates, a config search path known only to Hydra).

    Hydra's own listing of the groups copies its whole config repository once per group and
    choice, over a second of a CPU for xfmr's 20 groups; this reads the same directories, and a
    test holds its text to Hydra's."""
    import string

    from xfmr.api.choices import group_choices

    parsed = _hydra_args(argv)
    if parsed is None or not parsed[0].help or parsed[0].hydra_help or parsed[0].cfg:
        return None
    args, _ = parsed
    keys = [arg.split("=", 1)[0].lstrip("+~") for arg in args.overrides]
    config_dirs = _config_dirs(args, conf)
    hydras = any(key.startswith(("hydra/help", "hydra.help", "hydra.searchpath")) for key in keys)
    if not config_dirs or hydras or any((root / "hydra").exists() for root in config_dirs[1:]):
        return None
    help_cfg = OmegaConf.create({"hydra": {"help": OmegaConf.load(conf / "hydra/help/xfmr.yaml")}})
    template = str(help_cfg.hydra.help.template)
    # The model's schema is a group too, registered in Hydra's ConfigStore (`xfmr.schema`).
    stored = {SCHEMA_GROUP: [SCHEMA_NAME]}
    groups = sorted(_groups(config_dirs) | set(stored))
    listing = "".join(
        f"{g}: {', '.join(sorted({*group_choices(g, config_dirs), *stored.get(g, [])}))}\n"
        for g in groups
    )
    try:
        return string.Template(template).substitute(APP_CONFIG_GROUPS=listing)
    except (KeyError, ValueError):  # a placeholder only Hydra fills
        return None


def _groups(config_dirs: list[Path], parent: str = "") -> set[str]:
    """Every config group under `config_dirs` holding a YAML file, nested ones as a/b; not
    Hydra's own."""
    found = set()
    for root in config_dirs:
        for path in sorted((root / parent).iterdir()) if (root / parent).is_dir() else []:
            name = f"{parent}/{path.name}" if parent else path.name
            if not path.is_dir() or name == "hydra":
                continue
            if any(path.glob("*.yaml")):
                found.add(name)
            found |= _groups([root], name)
    return found


def main() -> None:
    argv = sys.argv[1:]
    check_group_choices(argv, config_dir())
    text = help_text(argv, config_dir())
    if text is not None:
        print(text)
        return
    _train_app()


if __name__ == "__main__":
    main()
