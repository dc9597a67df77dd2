"""Runs that survive kills, full disks and exhausted memory with nothing lost or half-written,
and run directories that hold everything needed to use them."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.config import compose_config
from helpers.runs import TINY, read_results
from xfmr.errors import DiskFull, RunFailed, UserError
from xfmr.files import atomic_path, atomic_write_bytes, write_json

pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line_failure(result, *needles: str) -> None:
    assert result.returncode != 0, result.output
    assert "Traceback" not in result.output, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


def _run_dirs(cwd: Path) -> list[Path]:
    return sorted((cwd / "outputs").glob("train/runs/*"))


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# --------------------------------------------------------------------------- atomic files


def test_a_write_that_fails_midway_leaves_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "config.yaml"
    target.write_text("old: 1\n")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as temporary:
        temporary.write_text("new: ")  # half of the new file, then the process is stopped
        raise KeyboardInterrupt
    assert target.read_text() == "old: 1\n"
    assert _leftovers(tmp_path) == []


def test_a_full_disk_names_the_file_and_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    target.write_text("{}\n")

    def no_space(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(DiskFull, match=f"to write {target}: the previous results.json is intact"):
        atomic_write_bytes(target, b'{"step": 4}\n')
    monkeypatch.undo()
    assert target.read_text() == "{}\n"
    assert _leftovers(tmp_path) == []


def test_json_written_by_runs_and_sweeps_is_strict(tmp_path: Path) -> None:
    from xfmr.sweeps.jobs import write_failure
    from xfmr.sweeps.summary import write_summary

    def refuse(constant: str):
        raise AssertionError(f"bare {constant} in the file")

    write_json(tmp_path / "a.json", {"loss": float("nan"), "best": [float("inf"), 1.0]})
    write_summary(tmp_path, {"best": {"value": float("nan")}})
    write_failure(tmp_path / "job", ["x=1"], "killed", {"metrics": {"val/loss": float("-inf")}})
    for path in (tmp_path / "a.json", tmp_path / "sweep.json", tmp_path / "job/results.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    assert json.loads((tmp_path / "a.json").read_text()) == {"loss": None, "best": [None, 1.0]}


# --------------------------------------------------------------------------- checkpoints


def test_lightnings_own_save_stages_the_checkpoint_in_the_system_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why xfmr gives the Trainer its own CheckpointIO: Lightning's writes the checkpoint under
    tempfile's directory and moves it over the target, a copy into the target itself when that
    directory is another filesystem."""
    import shutil as shutil_module
    import tempfile

    from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

    elsewhere = tmp_path / "system-tmp"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    moves = []
    real_move = shutil_module.move
    monkeypatch.setattr(
        shutil_module, "move", lambda src, dst, *a, **k: moves.append(src) or real_move(src, dst)
    )
    TorchCheckpointIO().save_checkpoint({"x": torch.zeros(2)}, tmp_path / "run" / "last.ckpt")
    assert moves and Path(moves[0]).parent == elsewhere


def test_a_checkpoint_save_killed_midway_leaves_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xfmr.training import checkpoint_saving
    from xfmr.training.checkpoint_saving import AtomicCheckpointIO

    path = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 2}, path)
    real_save = torch.save

    def killed_midway(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        with open(f, "r+b") as half:
            half.truncate(os.path.getsize(f) // 2)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_saving.torch, "save", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 4}, path)
    assert torch.load(path, weights_only=True) == {"global_step": 2}
    assert _leftovers(path.parent) == []


def test_a_full_disk_during_training_fails_the_run_and_keeps_its_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xfmr.training import checkpoint_saving
    from xfmr.training.run import run_training

    saves = []
    real_save = torch.save

    def disk_fills_up(obj, f, *args, **kwargs):
        saves.append(obj["global_step"])
        if len(saves) > 2:  # step 2's best.ckpt and last.ckpt fit, step 4's do not
            with open(f, "wb") as half:
                half.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpoint_saving.torch, "save", disk_fills_up)
    cfg = compose_config(tmp_path, ["size=tiny", "trainer.max_steps=4", "print_config=false"])
    with pytest.raises(
        RunFailed, match=r"no space left on the device to write .*checkpoints/"
    ) as e:
        run_training(cfg)
    assert "is intact" in str(e.value)
    run_dir = Path(cfg.paths.output_dir)
    results = read_results(run_dir)
    assert results["status"] == "failed" and "no space left" in results["reason"]
    for name in ("best.ckpt", "last.ckpt"):
        kept = torch.load(run_dir / "checkpoints" / name, weights_only=False)
        assert kept["global_step"] == 2
    assert _leftovers(run_dir / "checkpoints") == []


# --------------------------------------------------------------------------- memory


def test_running_out_of_memory_names_the_settings_to_lower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xfmr.training.module import XfmrModule
    from xfmr.training.run import run_training

    def allocate(self, batch, batch_idx):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 68719476736 bytes. Error code 12"
        )

    monkeypatch.setattr(XfmrModule, "training_step", allocate)
    cfg = compose_config(tmp_path, ["size=tiny", "print_config=false"])
    with pytest.raises(RunFailed, match="out of memory during training") as e:
        run_training(cfg)
    for setting in ("data.batch_size=4", "data.block_size=16", "trainer.precision=32-true"):
        assert setting in str(e.value)
    results = read_results(Path(cfg.paths.output_dir))
    assert results["status"] == "failed" and "data.batch_size=4" in results["reason"]


def test_other_runtime_errors_are_not_taken_for_memory() -> None:
    from xfmr.data.config import DataConfig
    from xfmr.training.guards import out_of_memory

    data = DataConfig.read(
        {"_target_": "xfmr.data.parallel.ParallelDataModule", "batch_size": 8, "max_length": 128},
        check_files=False,
    )
    shapes = RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    assert out_of_memory(shapes, data, "32-true") is None
    assert out_of_memory(ValueError("out of memory"), data, "32-true") is None
    reason = out_of_memory(MemoryError(), data, "32-true")
    assert "data.batch_size=8" in reason and "data.max_length=128" in reason


# --------------------------------------------------------------------------- run-directory lock


def _wait_for_holder(lock: Path, proc: subprocess.Popen, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lock.is_file() and lock.read_text().startswith("pid "):
            return lock.read_text().split()[1]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"{lock} never named its holder")


def test_a_run_directory_being_trained_in_is_refused_until_its_holder_dies(
    tmp_path: Path, corpus: Path
) -> None:
    from xfmr.run_dir.lock import hold_run_dir

    run_dir = tmp_path / "run"
    args = [
        *TINY,
        "data=text",
        f"data.path={corpus}",
        "logger=none",
        "callbacks.text_sample=null",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / ".cache"), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(
        [sys.executable, "-m", "xfmr.cli.train", *args, "trainer.max_steps=3000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid = _wait_for_holder(run_dir / ".lock", first)
        assert pid == str(first.pid)
        second = run_cli([*args, "trainer.max_steps=4"], tmp_path, timeout=120)
        _one_line_failure(second, f"run directory {run_dir} is in use", f"pid {first.pid}")
        assert first.poll() is None, "the first run goes on"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert run_dir.is_dir(), "a refused run leaves the other's directory alone"
    with hold_run_dir(run_dir):  # the OS released the killed holder's lock
        assert (run_dir / ".lock").read_text().startswith(f"pid {os.getpid()} ")


def test_a_killed_holders_forked_children_do_not_keep_the_lock(tmp_path: Path) -> None:
    """DataLoader workers are forked from the training process; after a kill -9 of that
    process they linger a few seconds, and must not keep its directory locked."""
    from xfmr.run_dir.lock import hold_run_dir

    holder = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "from xfmr.run_dir.lock import hold_run_dir\n"
        "with hold_run_dir(Path(sys.argv[1])):\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        quiet = os.open(os.devnull, os.O_RDWR)\n"
        "        os.dup2(quiet, 1), os.dup2(quiet, 2)\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    print(child, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", holder, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    child = int(proc.stdout)
    try:
        os.kill(child, 0)  # still alive, with the holder's descriptor of .lock
        with hold_run_dir(tmp_path):
            pass
    finally:
        os.kill(child, signal.SIGKILL)


def test_only_global_rank_zero_takes_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks that torchrun or SLURM started train beside rank 0 in its directory."""
    from xfmr.run_dir.lock import is_global_rank_zero

    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert is_global_rank_zero()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not is_global_rank_zero()
    monkeypatch.setenv("RANK", "2")  # the global rank decides: local rank 0 of a second node
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert not is_global_rank_zero()


# --------------------------------------------------------------------------- labels


DELIMITED = "xfmr.data.delimited.DelimitedDataModule"
LABELLED = "sentence\tlabel\n" + "the quick brown fox\tpos\nthe lazy dog\tneg\n" * 4


def test_a_run_keeps_its_labels_when_the_training_file_moves_or_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xfmr.cli.eval import main as eval_main
    from xfmr.runs.loading import load_run
    from xfmr.training.run import run_training

    train_file, val_file = tmp_path / "train.tsv", tmp_path / "val.tsv"
    train_file.write_text(LABELLED)
    val_file.write_text(LABELLED)
    encoder = ["arch=encoder", "size=tiny", "tokenizer=wordpiece", "tokenizer.vocab_size=120"]
    data = ["data=delimited", f"data.train_path={train_file}", f"data.val_path={val_file}"]
    cfg = compose_config(
        tmp_path, [*encoder, "objective=classification", *data, "callbacks.text_sample=null"]
    )
    run_training(cfg)
    run_dir = Path(cfg.paths.output_dir)
    assert json.loads((run_dir / "labels.json").read_text()) == ["neg", "pos"]

    train_file.rename(tmp_path / "moved.tsv")
    assert load_run(run_dir).objective.label_names == ["neg", "pos"]

    # Edited: read again, its labels would be ["pos"], a one-class head the weights do not fit.
    only_pos = tmp_path / "only_pos.tsv"
    only_pos.write_text("sentence\tlabel\n" + "the quick brown fox\tpos\n" * 4)
    out = tmp_path / "eval.json"
    args = [f"run_dir={run_dir}", f"data.train_path={only_pos}", f"out={out}"]
    monkeypatch.setattr(sys, "argv", ["xfmr-eval", *args])
    eval_main()  # in process: a subprocess would only add the imports
    assert json.loads(out.read_text())["examples"] == 8


def test_a_run_without_labels_json_reads_them_again_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from xfmr.data.config import DataConfig
    from xfmr.parts.labels import trained_labels

    tsv = tmp_path / "train.tsv"
    tsv.write_text(LABELLED)
    data = DataConfig.read({"_target_": DELIMITED, "train_path": str(tsv), "val_path": str(tsv)})
    with caplog.at_level("WARNING", logger="xfmr"):
        assert trained_labels(data, tmp_path) == ["neg", "pos"]
    assert "has no labels.json" in caplog.text


def test_resuming_on_data_with_other_labels_is_refused(tmp_path: Path) -> None:
    from xfmr.parts.labels import run_labels

    class Data:
        def __init__(self, labels):
            self.labels = labels

        def label_names(self):
            return list(self.labels)

    assert run_labels(Data(["neg", "pos"]), tmp_path, save=True) == ["neg", "pos"]
    assert run_labels(Data(["neg", "pos"]), tmp_path, save=True) == ["neg", "pos"]
    with pytest.raises(UserError, match=r"labels \[neg, neutral, pos\] differ from .*labels.json"):
        run_labels(Data(["neg", "neutral", "pos"]), tmp_path, save=True)


# --------------------------------------------------------------------------- refused configs


def test_a_refused_config_leaves_no_run_directory(tmp_path: Path) -> None:
    result = run_cli(["objective=mlm", "print_config=false"], tmp_path, timeout=120)
    _one_line_failure(result, "objective=mlm cannot train arch=decoder")
    assert _run_dirs(tmp_path) == []

    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    result = run_cli(["objective=mlm", f"hydra.run.dir={existing}"], tmp_path, timeout=120)
    _one_line_failure(result, "objective=mlm cannot train arch=decoder")
    assert (existing / "notes.txt").read_text() == "keep me"


def test_init_from_hf_without_transformers_names_the_extra(tmp_path: Path) -> None:
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    result = run_cli(
        ["size=tiny", f"init_from=hf:{tmp_path / 'gpt2'}", "print_config=false"],
        tmp_path,
        timeout=120,
        env={"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])},
    )
    _one_line_failure(result, "transformers package, which is not installed", "'xfmr[hf]'")
    assert _run_dirs(tmp_path) == []


def test_init_from_hf_checks_for_transformers_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from xfmr.parts.sources import init_source

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match=r"pip install -e '\.\[hf\]'"):
        init_source("hf:/nowhere")
