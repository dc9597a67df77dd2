"""Exact resume: a run killed with SIGKILL (inside an epoch, during validation, while a
checkpoint is being saved) and started again with the same command and run directory ends with
the same weights, optimizer state and metrics as the run that was never interrupted, bit for
bit; SIGINT and SIGTERM stop a run with a checkpoint and a message that says how to resume."""

from __future__ import annotations

import copy
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.runs import CORPUS, RESUMABLE_STEPS, read_results, resumable
from xfmr.training.run_summary import LOGGED_SPEEDS

# Kills the training process at a chosen point: after the optimizer step of `step` ("train"),
# in the middle of the validation that follows `step` ("validation"), or while the checkpoint
# of `step` is being saved, before its file is written ("save"). Loaded by the child from
# PYTHONPATH.
FAULTS = """
import os, signal
import lightning as L

class KillAt(L.Callback):
    def __init__(self, step, where):
        self.step, self.where = int(step), where

    def _kill(self):
        os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_end(self, trainer, *args):
        if self.where == "train" and trainer.global_step == self.step:
            self._kill()

    def on_validation_batch_end(self, trainer, *args):
        if self.where == "validation" and trainer.global_step == self.step and not trainer.sanity_checking:
            self._kill()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self.where == "save" and trainer.global_step == self.step:
            self._kill()
"""

STEPS = RESUMABLE_STEPS
COMMON = resumable(checkpoint_every=3)


def _text(root: Path) -> list[str]:
    (root / "corpus.txt").write_text(CORPUS)
    # Few windows, so the 10 steps cross two epoch boundaries (5 batches an epoch).
    return [
        "data=text",
        f"data.path={root / 'corpus.txt'}",
        "data.block_size=16",
        "data.train_stride=200",
    ]


def _documents(root: Path) -> list[str]:
    lines = CORPUS.splitlines()
    documents = ["\n".join(lines[i : i + 4]) for i in range(0, 80, 4)]
    (root / "documents.txt").write_text("\n\n".join(documents) + "\n")
    return [
        "arch=encoder",
        "objective=mlm_nsp",
        "data=documents",
        "tokenizer=wordpiece",
        "tokenizer.vocab_size=200",
        "model.type_vocab_size=2",
        f"data.path={root / 'documents.txt'}",
        "objective.max_length=32",
        "model.pos.max_positions=32",
    ]


def _parallel(root: Path) -> list[str]:
    words = [("katze", "cat"), ("hund", "dog"), ("vogel", "bird"), ("pferd", "horse")]
    pairs = [
        (f"eine {de} sieht {n} steine .", f"a {en} sees {n} stones .")
        for n in range(6)
        for de, en in words
    ]
    overrides = ["arch=encoder_decoder", "objective=seq2seq", "data=parallel", "data.max_length=16"]
    for split, rows in (("train", pairs[:20]), ("val", pairs[20:])):
        for side, index, suffix in (("source", 0, "de"), ("target", 1, "en")):
            path = root / f"{split}.{suffix}"
            path.write_text("".join(row[index] + "\n" for row in rows))
            overrides.append(f"data.{split}_{side}={path}")
    return overrides


def _delimited(root: Path) -> list[str]:
    rows = [(f"a fine warm film {n}", "1") for n in range(12)] + [
        (f"a dull cold film {n}", "0") for n in range(12)
    ]
    for name, part in (("train", rows), ("dev", rows[::3])):
        body = "".join(f"{text}\t{label}\n" for text, label in part)
        (root / f"{name}.tsv").write_text("sentence\tlabel\n" + body)
    return [
        "arch=encoder",
        "objective=classification",
        "data=delimited",
        f"data.train_path={root / 'train.tsv'}",
        f"data.val_path={root / 'dev.tsv'}",
    ]


FAMILIES = {
    "clm_text": _text,
    "mlm_nsp_documents": _documents,
    "seq2seq_parallel": _parallel,
    "classification_delimited": _delimited,
}


def _train(root: Path, data: list[str], run_dir: Path, *extra: str, env=None):
    return run_cli([*COMMON, *data, f"hydra.run.dir={run_dir}", *extra], root, env=env)


def _final_state(run_dir: Path) -> dict:
    checkpoint = torch.load(
        run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True
    )
    return {
        "weights": checkpoint["state_dict"],
        "optimizer": checkpoint["optimizer_states"][0]["state"],
    }


def _assert_same_run(resumed: Path, reference: Path) -> None:
    ours, theirs = _final_state(resumed), _final_state(reference)
    assert ours["weights"].keys() == theirs["weights"].keys()
    for name, tensor in theirs["weights"].items():
        assert torch.equal(ours["weights"][name], tensor), name
    for index, state in theirs["optimizer"].items():
        for key, value in state.items():
            assert torch.equal(ours["optimizer"][index][key], value), (index, key)
    a, b = read_results(resumed), read_results(reference)
    assert a["status"] == b["status"] == "completed"
    assert a["step"] == b["step"] == STEPS
    assert a["metrics"] == b["metrics"]
    timeless = [
        [{k: v for k, v in h.items() if k != "time_s"} for h in r["history"]] for r in (a, b)
    ]
    assert timeless[0] == timeless[1]  # every validation the same, at the same steps
    assert all(h["time_s"] > 0 for h in a["history"])  # training time went on from the checkpoint
    assert a["resumed_from"] and not b["resumed_from"]
    # The metrics log goes on from the checkpoint's step: every logged value is the same, in the
    # same order (timings aside).
    assert _logged(resumed) == _logged(reference)


def _logged(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "csv" / "metrics.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    return [{k: v for k, v in row.items() if k not in LOGGED_SPEEDS and v} for row in rows]


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("faults")
    (where / "faults.py").write_text(FAULTS)
    return {"PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_run_killed_anywhere_resumes_to_the_same_weights(tmp_path: Path, family: str, faults):
    data = FAMILIES[family](tmp_path)
    reference = tmp_path / "reference"
    done = _train(tmp_path, data, reference)
    assert done.returncode == 0, done.output
    # Checkpoints: step-3, step-6, step-9 (periodic) and last.ckpt (at the validations after
    # steps 4 and 8). Killed inside an epoch after step 5 (resumes from step 4); for text also
    # during the validation after step 8 (from step 6) and while step 9's checkpoint is being
    # written, before its file exists (from step 8).
    kills = [(5, "train")] + ([(8, "validation"), (9, "save")] if family == "clm_text" else [])
    for step, where in kills:
        run_dir = tmp_path / f"killed-{where}-{step}"
        kill = [
            "+callbacks.kill._target_=faults.KillAt",
            f"+callbacks.kill.step={step}",
            f"+callbacks.kill.where={where}",
        ]
        killed = _train(tmp_path, data, run_dir, *kill, env=faults)
        assert killed.returncode == -signal.SIGKILL, killed.output
        assert not (run_dir / "results.json").exists()
        resumed = _train(tmp_path, data, run_dir)
        assert resumed.returncode == 0, resumed.output
        assert "resuming from" in resumed.output
        _assert_same_run(run_dir, reference)


def _as_written_before_windows(path: Path, window: int) -> None:
    """Rewrite a checkpoint's loop state into the layout of xfmr's versions before a training
    batch was a window: optimizer steps in the automatic loop's progress (the manual loop's at
    0), and the epoch's training batches counted in micro-batches (the loader's place)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    loop = checkpoint["loops"]["fit_loop"]
    manual = "epoch_loop.manual_optimization.optim_step_progress"
    automatic = loop["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]
    automatic["step"] = copy.deepcopy(loop[manual])
    loop[manual] = {part: {"ready": 0, "completed": 0} for part in ("total", "current")}
    batches = loop["epoch_loop.batch_progress"]
    windows = batches["current"]
    position = loop["state_dict"]["combined_loader"][0]["position"]
    current = {key: position - windows["ready"] + count for key, count in windows.items()}
    total = {key: count + window * (batches["total"][key] - windows[key])
             for key, count in current.items()}  # fmt: skip
    batches["current"], batches["total"] = current, total
    torch.save(checkpoint, path)


def test_a_checkpoint_written_before_windows_resumes_at_its_step(tmp_path: Path, faults):
    """A run resumed from checkpoints in the loop layout of earlier versions (automatic
    optimization, a training batch per micro-batch) goes on from their step and ends as the run
    never interrupted, bit for bit: two micro-batches a step, 5 an epoch (its last window
    short), killed after step 5, resumed from the validation's checkpoint after step 4."""
    data = [*_text(tmp_path), "trainer.accumulate_grad_batches=2"]
    reference = tmp_path / "reference"
    done = _train(tmp_path, data, reference)
    assert done.returncode == 0, done.output
    run_dir = tmp_path / "killed"
    kill = ["+callbacks.kill._target_=faults.KillAt", "+callbacks.kill.step=5"]
    killed = _train(tmp_path, data, run_dir, *kill, "+callbacks.kill.where=train", env=faults)
    assert killed.returncode == -signal.SIGKILL, killed.output
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        _as_written_before_windows(path, window=2)
    resumed = _train(tmp_path, data, run_dir)
    assert resumed.returncode == 0, resumed.output
    assert "resuming from" in resumed.output and "last.ckpt" in resumed.output
    _assert_same_run(run_dir, reference)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_checkpoint_and_says_how_to_resume(tmp_path: Path, signum: int):
    data = _text(tmp_path)
    run_dir = tmp_path / "run"
    args = [
        *COMMON,
        *data,
        f"hydra.run.dir={run_dir}",
        "trainer.max_steps=100000",
        "trainer.val_check_interval=50",
    ]
    env = {**os.environ, "XFMR_CACHE_DIR": str(tmp_path / ".cache"), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xfmr.cli.train", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 300  # generous: a loaded machine starts slowly
    while not list((run_dir / "checkpoints").glob("step-*.ckpt")):  # training is under way
        assert proc.poll() is None and time.monotonic() < deadline, (
            proc.stdout.read() if proc.stdout else ""
        )
        time.sleep(0.2)
    sent = time.monotonic()
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 60  # one tiny step, a checkpoint and results.json
    assert proc.returncode == 130, output
    name = signal.Signals(signum).name
    assert f"{name}: stopped after step" in output
    assert "resume with: xfmr-train" in output and f"hydra.run.dir={run_dir}" in output
    results = read_results(run_dir)
    assert results["status"] == "interrupted"
    stopped = torch.load(
        run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True
    )
    assert stopped["global_step"] == results["step"] > 0
    # The same command goes on from there to the end.
    resumed = run_cli(
        [
            *args[:-2],
            "trainer.max_steps=" + str(results["step"] + 2),
            "trainer.val_check_interval=50",
        ],
        tmp_path,
    )
    assert resumed.returncode == 0, resumed.output
    assert read_results(run_dir)["step"] == results["step"] + 2
