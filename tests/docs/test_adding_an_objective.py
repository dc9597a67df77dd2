"""docs/objectives.md's "Adding an objective", run as written: the Python file and the config
file are taken from the page's blocks, put in a folder of their own outside the package, and used
through the page's own command line. If the example stops working, or stops being what the page
shows, this fails."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.cli import run_cli
from helpers.docs import block
from helpers.runs import TINY, read_results


def page_files() -> dict[str, tuple[str, str]]:
    """The page's files: the path each is shown under -> its block's id and text."""
    return {
        "my_objectives/smoothed_clm.py": ("smoothed-clm-py", block("smoothed-clm-py")),
        "my_configs/objective/smoothed_clm.yaml": ("smoothed-clm-yaml", block("smoothed-clm-yaml")),
    }


def page_command() -> list[str]:
    """The page's command line, after its `PYTHONPATH=.`: xfmr-train's arguments."""
    words = shlex.split(block("smoothed-clm-command"))
    assert words[:2] == ["PYTHONPATH=.", "xfmr-train"], words
    return words[2:]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder with the page's objective and its config, and nothing else of xfmr's."""
    page = (ROOT / "docs" / "objectives.md").read_text(encoding="utf-8")
    for name, (block_id, text) in page_files().items():
        lang = {"py": "python", "yaml": "yaml"}[name.rsplit(".", 1)[1]]
        assert f"`{name}`:\n\n```{lang} run={block_id}\n" in page, f"the page shows {name}"
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
        *page_command(),  # --config-dir my_configs objective=smoothed_clm, run from `project`
        *TINY,
        "data=text",
        f"data.path={project / 'corpus.txt'}",
        *extra,
    ]
    return run_cli(args, project, env=_env(project))


def test_the_pages_objective_trains_and_generates(project: Path) -> None:
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
