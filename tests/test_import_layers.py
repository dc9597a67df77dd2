"""The package's layers point down, as pyproject.toml's import-linter contracts state them: a
module that imports a layer above its own (nn reaching into training, data into objectives)
fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import ROOT


def test_imports_keep_the_contracts_in_pyproject() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
            ),
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout
