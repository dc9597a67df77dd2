"""examples/slurm/train.sbatch: its xfmr-train command composes and names real config keys, and
its #SBATCH lines agree with that command (tasks and nodes) and with the run's requeue signal."""

from __future__ import annotations

import re
import shlex

from omegaconf import OmegaConf

from helpers import TESTS_DIR

SCRIPT = TESTS_DIR.parent / "examples" / "slurm" / "train.sbatch"


def _sbatch_options(text: str) -> dict[str, str]:
    options = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            name, _, value = line.removeprefix("#SBATCH ").partition("=")
            options[name.strip()] = value.strip()
    return options


def _srun_overrides(text: str) -> list[str]:
    [line] = [line for line in text.splitlines() if line.startswith("srun ")]
    words = shlex.split(line)
    assert words[:2] == ["srun", "xfmr-train"], line
    return words[2:]


def _composed(overrides: list[str]):
    """xfmr-train's config with `overrides` (Hydra refuses a key or choice that does not
    exist); not checked against this machine, which has no 8 GPUs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from xfmr.paths import config_dir

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return compose(config_name="train", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def test_the_sbatch_script_agrees_with_the_command_it_runs() -> None:
    text = SCRIPT.read_text()
    options = _sbatch_options(text)
    cfg = _composed(_srun_overrides(text))
    assert int(options["--nodes"]) == cfg.trainer.num_nodes
    assert int(options["--ntasks-per-node"]) == cfg.trainer.devices
    assert cfg.trainer.strategy == "ddp"
    # SLURM's warning is the signal the run answers (slurm.requeue_signal), and the job may be
    # requeued.
    signal_name, delay = options["--signal"].split("@")
    assert signal_name == str(cfg.slurm.requeue_signal) and int(delay) > 0
    assert "--requeue" in options and cfg.slurm.requeue
    shipped = OmegaConf.load(TESTS_DIR.parent / "conf" / "train.yaml")
    assert f"--signal={shipped.slurm.requeue_signal}@" in text  # as shipped, not as overridden
    assert re.search(r"outputs/train/runs/slurm-\$SLURM_JOB_ID", text)
