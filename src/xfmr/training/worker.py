"""Entry point of DDP ranks 1..N-1: `python -m xfmr.training.worker RUN_DIR/config.yaml`."""

from __future__ import annotations

import sys

from xfmr.config import RunConfig
from xfmr.training.run import run_training


def main() -> None:
    run_training(RunConfig.read(sys.argv[1]), is_worker=True)


if __name__ == "__main__":
    main()
