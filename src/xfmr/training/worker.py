"""Entry point of DDP ranks 1..N-1: `python -m xfmr.training.worker RUN_DIR/config.yaml`."""

from __future__ import annotations

import sys

from omegaconf import OmegaConf

from xfmr.training.run import run_training


def main() -> None:
    cfg = OmegaConf.load(sys.argv[1])
    run_training(cfg, is_worker=True)


if __name__ == "__main__":
    main()
