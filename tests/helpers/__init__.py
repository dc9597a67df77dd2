"""What the tests share that is not a fixture (fixtures and hooks are tests/conftest.py's).

pyproject's pytest settings put tests/ on sys.path, so a test imports `from helpers.cli import
run_cli`. A process a test starts finds these modules with `helpers_env()`'s PYTHONPATH: a
callback named by `_target_: helpers.numeric_faults.NanLossAt`, an app run as
`python -m helpers.sweep_app`.
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
ROOT = TESTS_DIR.parent


def helpers_env() -> dict[str, str]:
    """PYTHONPATH for a process that imports `helpers`: tests/ first, then the caller's own
    PYTHONPATH, so a checkout other than the installed one stays ahead of it."""
    paths = [str(TESTS_DIR), os.environ.get("PYTHONPATH")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, paths))}
