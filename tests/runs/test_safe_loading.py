"""Safe loading: every checkpoint xfmr reads is unpickled with weights_only=True, so a crafted
file is refused in one line before any of its code runs; xfmr-export writes .safetensors that
load back (in xfmr and with `safetensors` alone) to the same logits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.runs import CORPUS, TINY
from xfmr.errors import UserError
from xfmr.nn import ModelConfig, build_model
from xfmr.run_dir.checkpoints import read_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


class _WritesMarker:
    """Unpickling this calls `open(marker, "w")`: the file appearing means the code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny causal LM (tied embedding and head), trained in process for two steps."""
    from xfmr.training.run import run_training

    tmp = tmp_path_factory.mktemp("run")
    run_training(
        compose_config(tmp, ["size=tiny", "print_config=false", "callbacks.text_sample=null"])
    )
    return tmp / "run"


@pytest.fixture
def crafted(tmp_path: Path, run: Path) -> tuple[Path, Path]:
    """(a checkpoint whose unpickling writes a marker file, that marker), laid out as a run's
    checkpoint (its tokenizer two levels up) and shaped like an xfmr checkpoint."""
    marker = tmp_path / "code-ran"
    fake_run = tmp_path / "fake_run"
    (fake_run / "checkpoints").mkdir(parents=True)
    shutil.copy(run / "tokenizer.json", fake_run / "tokenizer.json")
    path = fake_run / "checkpoints" / "crafted.ckpt"
    hparams = {"model_config": {"vocab_size": _WritesMarker(marker)}}
    torch.save({"state_dict": {}, "hyper_parameters": hparams}, path)
    torch.load(path, weights_only=False)  # the file does what it claims when loaded unsafely
    assert marker.exists()
    marker.unlink()
    return path, marker


def _fails_in_one_line(result, *needles: str) -> None:
    assert result.returncode != 0, result.output
    assert "Traceback" not in result.output, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


def test_checkpoints_xfmr_writes_load_with_weights_only(run: Path) -> None:
    for path in (run / "checkpoints").glob("*.ckpt"):
        state = torch.load(path, weights_only=True)
        assert isinstance(state["hyper_parameters"]["model_config"], dict)


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("xfmr.cli.eval", ["run_dir={run}", "checkpoint={crafted}"]),
        ("xfmr.cli.generate", ["run_dir={run}", "checkpoint={crafted}", "input=the"]),
        ("xfmr.cli.export", ["run_dir={run}", "checkpoint={crafted}"]),
        ("xfmr.cli.train", [*TINY, "data=text", "data.path={corpus}", "ckpt_path={crafted}"]),
        ("xfmr.cli.train", [*TINY, "data=text", "data.path={corpus}", "init_from={crafted}"]),
    ],
    ids=["eval", "generate", "export", "train-resume", "train-init_from"],
)
def test_a_crafted_pickle_is_refused_without_running(
    module: str, args: list[str], run: Path, crafted: tuple[Path, Path], tmp_path: Path
) -> None:
    path, marker = crafted
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    values = {"run": run, "crafted": path, "corpus": corpus}
    filled = [arg.format(**values) for arg in args]
    if module == "xfmr.cli.train":
        filled.append(f"hydra.run.dir={tmp_path / 'out'}")
    result = run_cli(filled, tmp_path, module=module)
    _fails_in_one_line(result, str(path), "cannot be loaded safely", "io.open")
    assert not marker.exists(), "the crafted file's code ran"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (os.urandom(256), "not a readable checkpoint"),
        (b"", "not a readable checkpoint"),
        (torch.zeros(3), "not an xfmr checkpoint"),
        ({"state_dict": {}}, "not an xfmr checkpoint"),
        ({"hyper_parameters": {"model_config": {}}}, "not an xfmr checkpoint"),
    ],
    ids=["random-bytes", "empty", "a-tensor", "no-model-config", "no-state-dict"],
)
def test_a_file_that_is_not_a_checkpoint_is_refused_naming_it(
    content, needle: str, tmp_path: Path
) -> None:
    path = tmp_path / "other.ckpt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(UserError) as error:
        read_checkpoint(path, key="ckpt_path")
    message = str(error.value)
    assert f"ckpt_path={str(path)!r}" in message and needle in message
    assert "\n" not in message


def test_a_bare_pickle_is_never_unpickled(tmp_path: Path) -> None:
    import pickle

    marker, path = tmp_path / "code-ran", tmp_path / "bare.ckpt"
    path.write_bytes(pickle.dumps({"state_dict": _WritesMarker(marker)}))
    with pytest.raises(UserError, match="not a readable checkpoint"):
        read_checkpoint(path)
    assert not marker.exists()


def test_resume_loads_the_checkpoint_with_weights_only(
    run: Path, tmp_path: Path, monkeypatch
) -> None:
    """Lightning's own load of ckpt_path (Trainer.fit) asks torch for weights_only too."""
    from xfmr.training.run import run_training

    asked = []
    load = torch.load

    def recording_load(*args, **kwargs):
        asked.append(kwargs.get("weights_only"))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    ckpt = run / "checkpoints" / "last.ckpt"
    overrides = ["size=tiny", "callbacks.text_sample=null", f"ckpt_path={ckpt}"]
    results = run_training(compose_config(tmp_path, [*overrides, "trainer.max_steps=3"]))
    assert results["step"] == 3
    assert len(asked) >= 2 and all(value is True for value in asked), asked


# --- xfmr-export --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(run: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export") / "share" / "model.safetensors"
    result = run_cli([f"run_dir={run}", f"out={out}"], out.parent.parent, module="xfmr.cli.export")
    assert result.returncode == 0, result.output
    assert "tied: lm_head.weight -> backbone.tok_emb.weight" in result.stdout
    return out


def _logits(model: torch.nn.Module) -> torch.Tensor:
    tokens = torch.arange(12).remainder(model.config.vocab_size).unsqueeze(0)  # (1, T)
    with torch.no_grad():
        return model.eval()(tokens)


def test_export_loads_into_a_fresh_model_with_safetensors_alone(run: Path, exported: Path):
    """What a Hugging Face user does: the config from the metadata, the weights by
    `safetensors.torch.load_model` (which ties shared tensors itself)."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    from xfmr.runs.loading import load_run

    with safe_open(str(exported), framework="pt") as file:
        metadata = file.metadata()
        names = set(file.keys())
    assert "lm_head.weight" not in names and "backbone.tok_emb.weight" in names
    assert json.loads(metadata["tied"]) == {"lm_head.weight": "backbone.tok_emb.weight"}
    fresh = build_model(ModelConfig.from_dict(json.loads(metadata["model_config"])))
    load_model(fresh, exported)
    assert (exported.parent / "tokenizer.json").read_bytes() == (
        run / "tokenizer.json"
    ).read_bytes()
    trained = load_run(run).model
    assert not torch.equal(_logits(build_model(fresh.config)), _logits(trained))
    assert torch.equal(_logits(fresh), _logits(trained))


def test_export_is_a_checkpoint_for_eval_generate_and_init_from(
    run: Path, exported: Path, tmp_path: Path
) -> None:
    from xfmr.runs.loading import load_run
    from xfmr.training.run import resolve_checkpoint, run_training

    loaded = load_run(run, checkpoint=exported)
    assert torch.equal(_logits(loaded.model), _logits(load_run(run).model))
    assert loaded.global_step == 2
    cfg = compose_config(tmp_path, ["size=tiny", f"init_from={exported}", "optim.lr=0.0"])
    report = run_training(cfg)["init_from"]
    assert report["skipped"] == [] and report["new"] == []
    with pytest.raises(UserError, match="holds weights only.*init_from="):
        resolve_checkpoint(str(exported), tmp_path, loaded.model_config.to_dict())


def test_export_refuses_a_wrong_out_and_another_tokenizer(run: Path, tmp_path: Path) -> None:
    bad = run_cli([f"run_dir={run}", "out=model.bin"], tmp_path, module="xfmr.cli.export")
    _fails_in_one_line(bad, "out='model.bin' must end in .safetensors")
    (tmp_path / "tokenizer.json").write_text("{}")
    other = run_cli(
        [f"run_dir={run}", f"out={tmp_path / 'm.safetensors'}"], tmp_path, module="xfmr.cli.export"
    )
    _fails_in_one_line(other, "another tokenizer")
    assert not (tmp_path / "m.safetensors").exists()


def test_a_safetensors_file_that_is_not_an_export_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, path)
    with pytest.raises(UserError, match="not an xfmr export"):
        read_checkpoint(path, key="init_from")
    path.write_bytes(os.urandom(64))
    with pytest.raises(UserError, match="not a readable .safetensors"):
        read_checkpoint(path, key="init_from")


def test_export_help_answers_without_torch(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['xfmr-export', '--help']\n"
        "from xfmr.cli.export import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert "Usage: xfmr-export KEY=VALUE" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"
