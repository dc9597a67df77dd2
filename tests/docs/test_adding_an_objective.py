"""README's "Adding an objective", run as written: the Python file and the config file are taken
from README.md, put in a folder of their own outside the package, and used through the real
command lines. If the example stops working, or stops being what README shows, this fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.cli import run_cli
from helpers.runs import TINY, read_results

README = ROOT / "README.md"
FILES = ("my_objectives/smoothed_clm.py", "my_configs/objective/smoothed_clm.yaml")


def readme_files() -> dict[str, str]:
    """Each file README shows as "`PATH`:" followed by a fenced block: PATH -> its text."""
    text = README.read_text(encoding="utf-8")
    found = dict(re.findall(r"^`([\w/.]+)`:\n\n```\w*\n(.*?)^```", text, flags=re.M | re.S))
    missing = [name for name in FILES if name not in found]
    assert not missing, f"README.md no longer shows {missing}"
    return {name: found[name] for name in FILES}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder with README's objective and its config, and nothing else of xfmr's."""
    for name, text in readme_files().items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat. the dog sat on the log.\n" * 40)
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    paths = [str(project), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _train(project: Path, *extra: str):
    args = [
        "--config-dir",
        str(project / "my_configs"),
        "objective=smoothed_clm",
        *TINY,
        "data=text",
        f"data.path={project / 'corpus.txt'}",
        *extra,
    ]
    return run_cli(args, project, env=_env(project))


def test_the_readme_objective_trains_and_generates(project: Path) -> None:
    run_dir = project / "run"
    steps = ["trainer.max_steps=40", "trainer.val_check_interval=10", "optim.lr=3e-3"]
    result = _train(project, f"hydra.run.dir={run_dir}", *steps)
    assert result.returncode == 0, result.output
    results = read_results(run_dir)
    assert results["status"] == "completed"
    losses = [row["val/loss"] for row in results["history"]]
    assert len(losses) == 4 and losses[-1] < 0.7 * losses[0], losses
    assert "val/ppl" in results["metrics"]  # the contract's default metric
    config = (run_dir / "config.yaml").read_text()
    assert "_target_: my_objectives.smoothed_clm.SmoothedCausalLM" in config

    generated = run_cli(
        [f"run_dir={run_dir}", "input=the cat", "generation.max_new_tokens=5"],
        project,
        module="xfmr.cli.generate",
        env=_env(project),
    )
    assert generated.returncode == 0, generated.output
    assert generated.stdout.strip().startswith("the cat"), generated.stdout


def test_the_config_check_knows_the_new_objective_before_torch_loads(project: Path) -> None:
    refused = _train(project, "arch=encoder", f"hydra.run.dir={project / 'refused'}")
    assert refused.returncode != 0
    assert (
        "objective=smoothed_clm cannot train arch=encoder: it needs arch in ['decoder', 'rnn']"
        in refused.output
    ), refused.output
    assert not (project / "refused").exists()
    # The check reads the class's declarations from its source: nothing imports torch for it.
    probe = (
        "import sys; from xfmr.objectives.registry import objective_facts; "
        "facts = objective_facts('my_objectives.smoothed_clm.SmoothedCausalLM'); "
        "print(facts.name, facts.archs, facts.reads, 'torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=project,
        env={**os.environ, **_env(project)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["smoothed_clm", "('decoder',", "'rnn')", "text", "False"], out
