"""Many nodes with torchrun, as a person runs it: one `torchrun` per node (here two on
127.0.0.1), each starting `xfmr-train` for its node rank. The two train one run: one run
directory, written by global rank 0 alone, whose final state is that of one process with the
same global batch."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli, started
from helpers.runs import CORPUS, TINY, read_results

# Every file put in place in the run directory (xfmr writes them whole and renames them into
# place: config, tokenizer, checkpoints, results), with the global rank of the process that did
# it; and each process's rank and pid when it starts. Read by every interpreter at start-up.
AUDIT = """
import os, shutil

_log = os.environ["XFMR_TEST_WRITES"]
_rank = os.environ.get("RANK", "-")


def _note(line):
    with open(_log, "a") as file:
        file.write(line + "\\n")


def _audited(rename):
    def wrapper(src, dst, *args, **kwargs):
        result = rename(src, dst, *args, **kwargs)
        _note(f"write {_rank} {os.path.abspath(os.fspath(dst))}")
        return result
    return wrapper


os.replace = _audited(os.replace)
os.rename = _audited(os.rename)
if _rank != "-":
    _note(f"start {_rank} {os.getpid()}")
"""

# Dropout off: the two processes would draw different masks from one process's.
ARGS = [
    *TINY,
    "model.dropout=0",
    "model.attn_dropout=0",
    "callbacks.text_sample=null",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun_two_nodes(tmp_path: Path, args: list[str], env: dict[str, str]) -> list[str]:
    """`torchrun --nnodes 2 --node-rank R ...` for R = 0, 1, as two nodes would run it; their
    output. Both are stopped if either fails or they take too long."""
    port = _free_port()
    outputs = []
    deadline = time.monotonic() + 300
    with contextlib.ExitStack() as stack:
        procs = []
        for node_rank in (0, 1):
            command = [
                sys.executable, "-m", "torch.distributed.run",  # the `torchrun` command
                "--nnodes", "2", "--node-rank", str(node_rank), "--nproc-per-node", "1",
                "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--rdzv-id", "nodes-test",
                "-m", "xfmr.cli.train", *args,
            ]  # fmt: skip
            procs.append(stack.enter_context(started(command, tmp_path, env)))
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
            outputs.append(out)
            assert proc.returncode == 0, out
    return outputs


def test_two_nodes_train_one_run_as_one_process_would(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "sitecustomize.py").write_text(AUDIT)
    writes = tmp_path / "writes.log"
    logs = tmp_path / "logs"
    data = ["data=text", f"data.path={corpus}", f"paths.log_dir={logs}"]
    env = {
        **os.environ,
        "XFMR_CACHE_DIR": str(tmp_path / ".cache"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "audit"), os.environ.get("PYTHONPATH", "")]),
        "XFMR_TEST_WRITES": str(writes),
        "PYTHONUNBUFFERED": "1",
    }
    nodes = ["trainer=ddp", "trainer.num_nodes=2", "trainer.devices=1", "trainer.accelerator=cpu"]
    _torchrun_two_nodes(tmp_path, [*ARGS, *data, *nodes], env)

    # One run directory, named after the rendezvous id both nodes were given.
    run_dirs = list((logs / "train" / "runs").iterdir())
    assert [p.name for p in run_dirs] == ["torchrun-nodes-test"]
    run_dir = run_dirs[0]
    results = read_results(run_dir)
    assert results["status"] == "completed" and results["step"] == 4
    assert results["world_size"] == 2 and results["num_nodes"] == 2

    # Global rank 0 wrote the run directory, each file once (checkpoints: once per save); rank
    # 1 wrote nothing there, and its log is its own.
    lines = [line.split(" ", 2) for line in writes.read_text().splitlines()]
    started = {rank: int(pid) for kind, rank, pid in lines if kind == "start"}
    assert set(started) == {"0", "1"}, lines
    into_run = [(rank, Path(path)) for kind, rank, path in lines if kind == "write"]
    into_run = [(rank, path) for rank, path in into_run if run_dir in path.parents]
    assert {rank for rank, _ in into_run} == {"0"}, into_run
    names = [path.relative_to(run_dir).as_posix() for _, path in into_run]
    for name in ("config.yaml", "tokenizer.json", "results.json"):
        assert names.count(name) == 1, names
    assert "checkpoints/last.ckpt" in names
    assert f"pid {started['0']} " in (run_dir / ".lock").read_text()  # rank 0 holds the lock
    assert (run_dir / "ddp" / "rank1.log").is_file()
    assert "GLOBAL_RANK: 1" in (run_dir / "ddp" / "rank1.log").read_text()
    assert "GLOBAL_RANK: 1" not in (run_dir / "train.log").read_text()

    # One process with the two nodes' global batch ends where they did.
    one_dir = tmp_path / "one"
    batch = int(next(a for a in TINY if a.startswith("data.batch_size=")).split("=")[1])
    one = run_cli(
        [*ARGS, *data, f"data.batch_size={2 * batch}", f"hydra.run.dir={one_dir}"], tmp_path
    )
    assert one.returncode == 0, one.output
    ours, theirs = (
        torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        for d in (run_dir, one_dir)
    )
    assert ours["global_step"] == theirs["global_step"] == 4
    for name, tensor in theirs["state_dict"].items():
        torch.testing.assert_close(ours["state_dict"][name], tensor, rtol=1e-4, atol=1e-5)
    assert results["metrics"]["val/loss"] == pytest.approx(
        read_results(one_dir)["metrics"]["val/loss"], rel=1e-4
    )
