"""Logger factories that need a decision at run time."""

from __future__ import annotations

import netrc
import os
from typing import Any


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def wandb_logger(*, offline: bool | str = "auto", **kwargs: Any):
    """A Lightning `WandbLogger`; `offline="auto"` logs offline unless an API key is configured
    (`WANDB_MODE` in the environment, if set, wins). Sync later with `wandb sync DIR`."""
    from lightning.pytorch.loggers import WandbLogger

    if offline == "auto":
        offline = os.environ.get("WANDB_MODE") == "offline" or not has_wandb_credentials()
    return WandbLogger(offline=bool(offline), **kwargs)
