"""The run's typed config (`xfmr.config`), made once from the composed config: every section
refuses a key it does not have with the nearest ones, a refusal of a value the person did not
type names the file that set it, what the run chooses itself is chosen once and recorded, the
config is frozen and reads back from config.yaml as it was written, and ids from the
environment name a run directory only as one plain path component."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import xfmr
from helpers.runs import CORPUS, TINY
from xfmr.config import RunConfig
from xfmr.errors import UserError


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(CORPUS)
    return tmp_path


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("trainer.max_step=5", "trainer.max_step is not a trainer key: did you mean trainer.max_steps"),
        ("optim.lrr=5", "optim.lrr is not an optim key: did you mean optim.lr?"),
        ("data.batchsize=5", "data.batchsize is not a data key: did you mean data.batch_size"),
        ("schedule.warmup_step=5", "schedule.warmup_step is not a schedule key: did you mean schedule.warmup_steps"),
        ("tokenizer.vocabsize=5", "tokenizer.vocabsize is not a tokenizer key: did you mean tokenizer.vocab_size"),
        ("callbacks.text_sample.max_new_token=5", "callbacks.text_sample.max_new_token is not a callbacks.text_sample key: did you mean callbacks.text_sample.max_new_tokens"),
        ("logger.csv.save_dirr=x", "logger.csv.save_dirr is not a logger.csv key: did you mean logger.csv.save_dir"),
        ("nonfinite.max_skip=1", "nonfinite.max_skip is not a nonfinite key: did you mean nonfinite.max_skips"),
        ("finetune.backbone_lr=0.1", "finetune.backbone_lr is not a finetune key: did you mean finetune.backbone_lr_scale"),
        ("slurm.requeue_sig=USR1", "slurm.requeue_sig is not a slurm key: did you mean slurm.requeue_signal"),
        ("throughput.peak_tflop=1", "throughput.peak_tflop is not a throughput key: did you mean throughput.peak_tflops"),
        ("model.n_layer=2", "model.n_layer is not a model key: did you mean model.n_layers"),
        ("sed=3", "sed is not a top-level key: did you mean seed"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("added", [False, True])
def test_a_misspelt_key_of_any_section_is_refused_with_the_nearest(
    here: Path, override: str, said: str, added: bool
) -> None:
    with pytest.raises(UserError) as refused:
        xfmr.compose("size=tiny", f"+{override}" if added else override)
    message = str(refused.value)
    assert message.startswith(said), message
    assert "\n" not in message and "valid keys:" in message


def test_a_key_a_section_takes_but_its_file_leaves_out_is_added_with_a_plus(here: Path) -> None:
    with pytest.raises(UserError, match=r"add it with \+trainer.max_time=00:00:01:00"):
        xfmr.compose("size=tiny", "trainer.max_time=00:00:01:00")
    composed = xfmr.compose("size=tiny", "+trainer.max_time=00:00:01:00")
    assert composed.config.trainer.max_time == "00:00:01:00"


def test_a_refused_value_names_the_file_that_set_it_unless_it_was_typed(here: Path) -> None:
    with pytest.raises(UserError) as refused:
        xfmr.compose("experiment=nanogpt_shakespeare_char", "arch=rnn")
    message = str(refused.value)
    assert message.startswith("model.bias=False applies to arch in")
    assert message.endswith("(model.bias was set by experiment=nanogpt_shakespeare_char)")
    with pytest.raises(UserError) as typed:
        xfmr.compose("arch=rnn", "model.bias=false")
    assert "set by" not in str(typed.value)
    with pytest.raises(UserError) as missing:  # its data is under paths.data_dir, not here
        xfmr.compose("experiment=nanogpt_shakespeare_char")
    assert str(missing.value).endswith(
        f"does not exist: give a text file or a directory of .txt files; `xfmr-data get "
        f"tinyshakespeare --data-dir {here / 'data'}` fetches it there "
        "(data.path was set by experiment=nanogpt_shakespeare_char)"
    )


def test_what_the_run_chooses_itself_is_chosen_once_and_recorded(here: Path) -> None:
    config = xfmr.compose("size=tiny").config
    assert config.trainer.precision == "32-true"  # auto, on this CPU
    assert config.schedule.warmup_steps == 100  # warmup_ratio 0.1667 of 600 steps
    assert config.data.num_workers == 0  # auto, on a CPU
    assert dict(config.resolved) == {
        "trainer.precision": "auto",
        "schedule.warmup_steps": {"warmup_ratio": 0.1667},
        "data.num_workers": "auto",
    }
    written = yaml.safe_load(config.to_yaml())
    assert written["trainer"]["precision"] == "32-true"
    assert written["resolved"]["trainer.precision"] == "auto"


def test_the_config_is_frozen_and_reads_back_as_written(here: Path) -> None:
    config = xfmr.compose(*TINY, "data=text", f"data.path={here / 'corpus.txt'}").config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 3  # type: ignore[misc]
    with pytest.raises(TypeError, match="frozen"):
        config.data.settings["batch_size"] = 8  # type: ignore[index]
    again = RunConfig.from_dict(yaml.safe_load(config.to_yaml()))
    assert again == config and again.to_yaml() == config.to_yaml()
    # The attribute path of a value is its key on the command line.
    assert (config.data.batch_size, config.optim.lr, config.trainer.max_steps) == (4, 1e-3, 4)
    assert config.callbacks.get("model_checkpoint").get("filename") == "best"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SLURM_JOB_ID", "7/../../elsewhere"), ("SLURM_JOB_ID", ".."), ("TORCHELASTIC_RUN_ID", "a/b")],
)
def test_an_id_from_the_environment_names_a_run_directory_only_as_one_component(
    here: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    if variable.startswith("SLURM"):
        monkeypatch.setenv("SLURM_NTASKS", "1")
        monkeypatch.setenv("SLURM_JOB_NAME", "train")
    monkeypatch.setenv(variable, value)
    with pytest.raises(UserError) as refused:
        xfmr.compose("size=tiny")
    message = str(refused.value)
    assert message.startswith(f"{variable}={value!r} cannot name the run directory"), message
    assert "\n" not in message and "hydra.run.dir=DIR" in message
    assert not (here / "outputs").exists()
