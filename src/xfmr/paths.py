"""Where the shipped config tree lives: inside the wheel, or beside `src/` in a checkout."""

from __future__ import annotations

from pathlib import Path


def config_dir() -> Path:
    packaged = Path(__file__).resolve().parent / "conf"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "conf"
