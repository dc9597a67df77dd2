"""`xfmr-train`: compose an experiment from config groups and train it.

A run goes through `xfmr.api`, as `xfmr.train(xfmr.compose(...))` does: its config is composed,
read once into a typed `RunConfig` and checked (a refusal is one line, before anything is
printed or built), then trained. `--check` stops after the checks and prints the config the run
would train with. A sweep (`-m`) and Hydra's own flags (`--cfg`, `--info`, ...) go through
Hydra's main, each job of a sweep through the same `xfmr.api` path.

Only Hydra and OmegaConf load before the config is checked, so `--help` and mistakes are fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from xfmr.api.jobs import checked_first
from xfmr.cli.common import fail, print_config_tree
from xfmr.errors import RunFailed, RunInterrupted, UserError
from xfmr.paths import config_dir
from xfmr.schema import SCHEMA_GROUP, SCHEMA_NAME

PROG = "xfmr-train"
CHECK_FLAG = "--check"
_TREE_ORDER = (
    "model",
    "data",
    "tokenizer",
    "objective",
    "optim",
    "schedule",
    "trainer",
)
# Hydra's flags that ask it to print something or to run a sweep: Hydra's main answers them.
_HYDRA_ONLY = (
    "hydra_help", "cfg", "resolve", "package", "multirun", "shell_completion", "config_path",
    "config_name", "experimental_rerun", "info", "version",
)  # fmt: skip
log = logging.getLogger("xfmr")


def train_run(args: argparse.Namespace, *, check_only: bool) -> None:
    """One run, through `xfmr.api`: composed and checked, printed, trained; exits non-zero with
    one line on a refusal (2), a failed run (1) or an interrupted one (130, the shell's code
    for a job stopped by a signal)."""
    from xfmr.api.composing import compose
    from xfmr.api.training import run_experiment

    try:
        experiment = compose(*args.overrides, config_dir=args.config_dir, unique_dir=False)
    except UserError as e:
        fail(PROG, str(e))
    if check_only:
        print(experiment.config.to_yaml(), end="")
        return
    if experiment.config.print_config:
        print_config_tree(experiment.config.to_dict(), _TREE_ORDER)
    try:
        run_experiment(experiment)
    except UserError as e:
        fail(PROG, str(e))
    except RunFailed as e:  # results.json says so too; the exit code tells a script or sweep
        fail(PROG, str(e), code=1)
    except RunInterrupted as e:
        fail(PROG, str(e), code=130)


@checked_first
def train_job(cfg: DictConfig) -> float | None:
    """One job of a sweep (Hydra's task function): its config made and checked, the run
    trained, the optimized metric returned. A module-level function, so xfmr's launcher can
    send it to the child process a sweep's job runs in."""
    from hydra.core.hydra_config import HydraConfig

    from xfmr.api.jobs import job_config
    from xfmr.api.training import fit

    hydra_cfg = HydraConfig.get()
    # Unresolved: an override may itself be an interpolation ("a=${b}").
    overrides = list(OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False))
    try:
        config = job_config(cfg, hydra_cfg, overrides)
        if config.print_config:
            print_config_tree(config.to_dict(), _TREE_ORDER)
        results = fit(config, overrides)
    except UserError as e:
        fail(PROG, str(e))
    except RunFailed as e:
        fail(PROG, str(e), code=1)
    except RunInterrupted as e:
        fail(PROG, str(e), code=130)
    log.info("run directory: %s", config.run_dir)
    metric = config.optimized_metric
    return results["metrics"].get(metric) if metric and results else None


_train_app = hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="train")(
    train_job
)


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
    """`argv` read as Hydra's main reads it, and the words it does not recognize; None if it
    refuses them (Hydra will say why when it reads them again)."""
    parser = hydra_parser()
    try:
        return parser.parse_known_args(argv)
    except argparse.ArgumentError:
        return None


def hydra_parser() -> argparse.ArgumentParser:
    """The flags of `hydra.main`'s command line (Hydra 1.3), which xfmr-train reads first to
    tell a run from a sweep and from Hydra's own questions. Hydra's parser is internal
    (`hydra._internal.utils.get_args_parser`); tests/cli/test_cli_grammar.py holds this one to
    its flags."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for flags in (("--help", "-h"), ("--hydra-help",), ("--resolve",), ("--run", "-r")):
        parser.add_argument(*flags, action="store_true")
    parser.add_argument("--multirun", "-m", action="store_true")
    parser.add_argument("--shell-completion", "-sc", action="store_true")
    parser.add_argument("--version", action="store_true")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    for flags in (("--package", "-p"), ("--config-path", "-cp"), ("--config-name", "-cn")):
        parser.add_argument(*flags)
    parser.add_argument("--config-dir", "-cd")
    parser.add_argument("--experimental-rerun")
    infos = ["all", "config", "defaults", "defaults-tree", "plugins", "searchpath"]
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=infos)
    return parser


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
    check_only = CHECK_FLAG in argv
    argv = [arg for arg in argv if arg != CHECK_FLAG]
    text = help_text(argv, config_dir())
    if text is not None:
        print(text)
        return
    parsed = _hydra_args(argv)
    if parsed is not None and not parsed[1] and not parsed[0].help:
        args = parsed[0]
        if not any(getattr(args, flag) for flag in _HYDRA_ONLY):
            train_run(args, check_only=check_only)
            return
        if check_only:
            fail(
                PROG,
                f"{CHECK_FLAG} checks one run: give it overrides (and --config-dir), not -m "
                "or Hydra's own flags",
            )
        if args.cfg and not args.multirun and args.config_path is None and args.config_name is None:
            check_first(args)  # --cfg prints only a config the run would take
    check_group_choices(argv, config_dir())
    _train_app()


def check_first(args: argparse.Namespace) -> None:
    """The checks a run would make, before Hydra prints its config (`--cfg job`)."""
    from xfmr.api.composing import compose

    try:
        compose(*args.overrides, config_dir=args.config_dir, unique_dir=False)
    except UserError as e:
        fail(PROG, str(e))


if __name__ == "__main__":
    main()
