"""Headless chromium for the tests that open a page in a real browser (no network): skipped
where chromium is missing, except in CI, which installs it (.ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-unsafe-swiftshader",  # software WebGL, which plotly's parallel coordinates draw with
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=10000",  # let the page's scripts run before the DOM is read
]


def chromium() -> str:
    found = shutil.which("chromium") or (CHROMIUM if os.access(CHROMIUM, os.X_OK) else None)
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is missing; .ci/run installs it (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium)")


def browse(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """chromium with `args` (`--dump-dom URL`, `--screenshot=PNG URL`), in a fresh profile."""
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
