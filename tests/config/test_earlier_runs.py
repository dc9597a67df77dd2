"""Run directories that earlier versions of xfmr wrote still load: their config.yaml files (in
earlier_runs/, written by xfmr 9da2c96, and by 2557870 from before positions moved under
`model`; ROOT stands for the folder they were trained in) read into a `RunConfig` as they were
trained, and a run whose config.yaml is one of them is used by `xfmr.api.Run` as any other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from xfmr.config import RunConfig

EARLIER = Path(__file__).parent / "earlier_runs"
# Each file: what it was trained as.
TRAINED = {
    "clm": ("decoder", "learned", "clm", "TextCorpusDataModule"),
    "seq2seq": ("encoder_decoder", "learned", "seq2seq", "SyntheticTranslationDataModule"),
    "classification": ("encoder", "learned", "classification", "DelimitedDataModule"),
    "rotary_pos_section": ("decoder", "rotary", "clm", "TextCorpusDataModule"),
    "rnn_target": ("rnn", "none", "clm", "TextCorpusDataModule"),
}


def _earlier(name: str, root: Path) -> dict:
    return yaml.safe_load((EARLIER / f"{name}.yaml").read_text().replace("ROOT", str(root)))


def test_every_file_here_is_in_the_table() -> None:
    assert sorted(p.stem for p in EARLIER.glob("*.yaml")) == sorted(TRAINED)


@pytest.mark.parametrize("name", sorted(TRAINED))
def test_an_earlier_config_reads_as_it_was_trained(name: str, tmp_path: Path) -> None:
    written = _earlier(name, tmp_path)
    config = RunConfig.from_dict(written)
    arch, pos, objective, data = TRAINED[name]
    assert (config.model.arch, config.model.pos.name, config.objective.name) == (
        arch,
        pos,
        objective,
    )
    assert config.data.target.name == data
    assert config.trainer.precision == "32-true" and config.seed == 1337
    assert config.resolved == {}, "nothing was recorded as resolved then"
    assert config.run_dir == tmp_path / name
    # Written back, it reads the same (in today's layout).
    assert RunConfig.from_dict(yaml.safe_load(config.to_yaml())) == config


def test_the_rnn_keeps_the_width_it_chose_for_its_target() -> None:
    config = RunConfig.from_dict(_earlier("rnn_target", Path("/nowhere")))
    assert config.model.target_params == 20000 and config.model.d_model == 48  # chosen then


def test_an_earlier_config_naming_a_class_since_moved_still_reads() -> None:
    """9da2c96 named its progress bar xfmr.training.callbacks.StepProgressBar: the run's
    config reads (to evaluate it); a new run naming it is refused (tests/test_targets.py)."""
    written = _earlier("clm", Path("/nowhere"))
    written["callbacks"]["progress_bar"] = {
        "_target_": "xfmr.training.callbacks.StepProgressBar",
        "refresh_rate": 1,
    }
    config = RunConfig.from_dict(written)
    assert config.callbacks.get("progress_bar").name == "StepProgressBar"


def test_a_run_with_an_earlier_config_is_used_as_any_other(tiny_run, tmp_path: Path) -> None:
    """tiny_run's checkpoints under the config.yaml an earlier xfmr wrote for the same run."""
    run_dir = tiny_run.copy(tmp_path / "clm")
    shutil.copy(tiny_run.dir.parent / "corpus.txt", tmp_path / "corpus.txt")
    (run_dir / "config.yaml").write_text(
        (EARLIER / "clm.yaml").read_text().replace("ROOT", str(tmp_path))
    )
    import xfmr

    run = xfmr.open_run(run_dir)
    assert run.config.model.arch == "decoder" and run.config.data.block_size == 16
    assert isinstance(run.generate("the quick", max_new_tokens=4), str)
    report = run.evaluate()
    assert report["loss"] > 0 and report["global_step"] == 4
