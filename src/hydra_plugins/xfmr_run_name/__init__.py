"""Registers `${run_name:DEFAULT}`, the run directory's name in conf/hydra/default.yaml
(`xfmr.run_dir.cluster.run_name`), when Hydra starts: Hydra imports every module of
`hydra_plugins` before it composes a config, so `xfmr-train`, `xfmr.compose` and Hydra's
compose API all resolve it."""

from omegaconf import OmegaConf

from xfmr.run_dir.cluster import run_name

OmegaConf.register_new_resolver("run_name", run_name, replace=True)
