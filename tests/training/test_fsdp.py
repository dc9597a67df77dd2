"""trainer=fsdp on two CPU processes (gloo): FSDP2 per block, sharded checkpoints that a run
resumes from exactly and that every entry point reading a run reads whole; clipping by the
global norm over the shards; the bf16 path on a GPU (skipped without one)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import helpers_env
from helpers.cli import run_cli
from helpers.runs import CORPUS, FSDP, TINY, read_results
from xfmr.errors import UserError
from xfmr.run_dir.checkpoints import read_checkpoint
from xfmr.run_dir.files import is_sharded_checkpoint


def _full(path: Path) -> dict:
    """Everything a sharded checkpoint holds, optimizer included, by Lightning's consolidation."""
    from lightning.fabric.utilities.load import _load_distributed_checkpoint

    return _load_distributed_checkpoint(path)


def test_a_sharded_run_writes_folders_of_shards(fsdp_run) -> None:
    results = read_results(fsdp_run.dir)
    assert results["status"] == "completed" and results["world_size"] == 2
    assert results["step"] == 4
    checkpoints = fsdp_run.dir / "checkpoints"
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == ["best.ckpt", "last.ckpt", "step-0000002.ckpt", "step-0000004.ckpt"], names
    for name in names:
        assert is_sharded_checkpoint(checkpoints / name)
        assert len(list((checkpoints / name).glob("*.distcp"))) == 2, "one shard a rank"
    assert (fsdp_run.dir / "ddp" / "rank1.log").is_file()
    assert "sample after step 4" in (fsdp_run.dir / "train.log").read_text()


def test_lm_eval_scores_a_sharded_model_on_every_rank_and_rank_zero_reports(fsdp_run) -> None:
    """callbacks.lm_eval under FSDP: every rank scores together, as the sharded forwards need;
    the run does not hang, and rank 0's scores reach results.json at each step due."""
    history = read_results(fsdp_run.dir)["history"]
    metric = "eval/xfmr_minimal_pairs/acc"
    assert [row["step"] for row in history] == [2, 4]
    assert all(0 <= row[metric] <= 1 for row in history), history
    assert "lm_eval after step 4" in (fsdp_run.dir / "train.log").read_text()


def test_a_sharded_checkpoint_reads_whole_with_its_ties(fsdp_run) -> None:
    state = read_checkpoint(fsdp_run.dir / "checkpoints" / "last.ckpt")
    assert state["global_step"] == 4
    weights = state["state_dict"]
    assert weights["model.lm_head.weight"] is weights["model.backbone.tok_emb.weight"]
    full = _full(fsdp_run.dir / "checkpoints" / "last.ckpt")
    assert weights.keys() == full["state_dict"].keys()
    for name, tensor in full["state_dict"].items():
        assert torch.equal(weights[name], tensor), name
    assert "optimizer_0" not in state


def test_a_folder_that_is_not_a_sharded_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.ckpt").mkdir()
    with pytest.raises(UserError, match=r"is a folder, but not a sharded checkpoint"):
        read_checkpoint(tmp_path / "x.ckpt")


def test_resuming_from_a_sharded_checkpoint_is_exact(fsdp_run, tmp_path: Path) -> None:
    """From step 2's folder to step 4: the weights and the optimizer's state are those of the run
    that was not stopped, bit for bit, and so is its validation loss."""
    step2 = fsdp_run.dir / "checkpoints" / "step-0000002.ckpt"
    resumed = tmp_path / "resumed"
    result = run_cli([*fsdp_run.args, f"hydra.run.dir={resumed}", f"ckpt_path={step2}"], tmp_path)
    assert result.returncode == 0, result.output
    results = read_results(resumed)
    assert results["resumed_from"] == str(step2) and results["step"] == 4
    original = read_results(fsdp_run.dir)
    assert results["metrics"]["val/loss"] == original["metrics"]["val/loss"]
    ours, theirs = (
        _full(resumed / "checkpoints/last.ckpt"),
        _full(fsdp_run.dir / "checkpoints/last.ckpt"),
    )
    for section in ("state_dict", "optimizer_0"):
        flat_ours, flat_theirs = _tensors(ours[section]), _tensors(theirs[section])
        assert flat_ours.keys() == flat_theirs.keys() and flat_ours, section
        for name, tensor in flat_theirs.items():
            assert torch.equal(flat_ours[name], tensor), f"{section}: {name}"


def _tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        return {
            k: v
            for key, value in tree.items()
            for k, v in _tensors(value, f"{prefix}.{key}").items()
        }
    return {}


def test_export_average_eval_and_open_run_read_a_sharded_run(fsdp_run, tmp_path: Path) -> None:
    import xfmr
    from xfmr.runs.averaging import average_checkpoints

    run = fsdp_run.copy(tmp_path / "run")
    whole = read_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    opened = xfmr.open_run(run)
    assert opened.status == "completed"
    exported = read_checkpoint(
        opened.export(tmp_path / "out" / "model.safetensors", checkpoint="last")
    )
    assert exported["state_dict"].keys() == whole.keys()
    for name, tensor in whole.items():
        assert torch.equal(exported["state_dict"][name], tensor), name
    assert isinstance(opened.generate("the", checkpoint="last", max_new_tokens=4), str)
    report = opened.evaluate(checkpoint="last", by_position=False)
    assert report["global_step"] == 4 and report["loss"] > 0
    averaged = average_checkpoints(run, last=2)
    assert [a["file"] for a in averaged["averaged_from"]] == [
        "step-0000004.ckpt",
        "step-0000002.ckpt",
    ]
    step2 = read_checkpoint(run / "checkpoints" / "step-0000002.ckpt")["state_dict"]
    mean = read_checkpoint(Path(averaged["out"]))["state_dict"]
    for name, tensor in whole.items():
        torch.testing.assert_close(
            mean[name], (tensor.double() + step2[name].double()).div(2).float()
        )
    assert mean["model.lm_head.weight"] is mean["model.backbone.tok_emb.weight"]


def test_init_from_a_sharded_checkpoint_on_one_process(fsdp_run, tmp_path: Path) -> None:
    """A sharded run's weights start a plain one-process run (here without activation
    checkpointing, which changes no weight)."""
    source = fsdp_run.dir / "checkpoints" / "last.ckpt"
    run_dir = tmp_path / "finetune"
    args = [a for a in fsdp_run.args if a not in FSDP and "activation_checkpointing" not in a]
    result = run_cli([*args, f"init_from={source}", f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 0, result.output
    transfer = read_results(run_dir)["init_from"]
    assert transfer["source"] == str(source)
    assert transfer["loaded"] == len(read_checkpoint(source)["state_dict"]) and not transfer["new"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_clipping_under_fsdp_is_the_update_of_one_process(tmp_path: Path) -> None:
    """Two ranks, each holding half of every block and fed half the batch, clip by the global
    norm over both shards: the same total as one process with the whole model and batch, and
    the same weights after the step."""
    out = tmp_path / "clipping.json"
    env = {**os.environ, **helpers_env(), "MASTER_ADDR": "127.0.0.1"}
    env.update(MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "helpers.sharded_clipping", str(out)],
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=120)[0] for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), outputs
    measured = json.loads(out.read_text())
    assert measured["sharded_type"] == "DTensor"
    assert measured["whole"] > 10 * measured["max_norm"], "clipping must act"
    assert measured["sharded"] == pytest.approx(measured["whole"], rel=1e-5)
    # AdamW's first update is lr * g / (|g| + eps): for a clipped gradient far under eps (1e-8;
    # two thirds of them here) it is lr * g / eps, which scales the gradient's rounding, its
    # sums over the batch made in another order (two halves reduce-scattered against one whole
    # batch), by lr / eps = 1e6. One such element (|g| about 7e-10) moves by 1.03e-6 on torch
    # 2.13's CPU kernels. 1e-5 allows a gradient difference of 1e-11 there: a hundredth of one
    # float32 rounding step of the largest clipped gradient (8.8e-3), far under what a clip by
    # another norm changes.
    assert measured["difference"] < 1e-5, measured


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            ["arch=rnn", "pos=none"],
            "trainer=fsdp shards a model per transformer block, and arch=rnn",
        ),
        (["trainer.precision=64-true"], "trainer=fsdp with trainer.precision=64-true"),
    ],
)
def test_what_fsdp_cannot_shard_is_refused_before_anything_starts(
    tmp_path: Path, overrides: list[str], needle: str
) -> None:
    from helpers.config import compose_config

    with pytest.raises(UserError, match=needle):
        compose_config(tmp_path, [*FSDP, *overrides])
    from xfmr.training.sharding import shard_blocks

    with pytest.raises(UserError, match="trainer=fsdp shards a model per transformer block"):
        shard_blocks(torch.nn.LSTM(4, 4), None, precision="32-true", arch="rnn")


def test_xfmr_starts_the_processes_of_ddp_and_fsdp_only() -> None:
    from xfmr.training.launch import launched_locally, processes_to_launch

    sharded = {"_target_": "xfmr.training.sharding.ShardedStrategy"}
    assert launched_locally("ddp") and launched_locally("ddp_find_unused_parameters_true")
    assert launched_locally(sharded)
    assert not any(map(launched_locally, ["auto", "ddp_spawn", "fsdp", None]))
    assert not launched_locally({"_target_": "lightning.pytorch.strategies.FSDPStrategy"})
    assert processes_to_launch({"strategy": sharded, "devices": 2, "accelerator": "cpu"}) == 2


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_bf16_mixed_gathers_bfloat16_and_keeps_float32_shards(device: str) -> None:
    """The policy alone, on one rank: a block computes with bfloat16 weights while its shard
    (what the optimizer steps and the checkpoint holds) stays float32. A tiny forward, so
    CPU's emulated bfloat16 costs nothing here; training in bf16 is checked on a GPU."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from xfmr.nn.config import ModelConfig
    from xfmr.objectives import CausalLMObjective
    from xfmr.training.sharding import shard_blocks

    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        config = ModelConfig(vocab_size=40, n_layers=2, n_heads=2, d_model=16, dropout=0.0)
        model = CausalLMObjective().build_model(config).to(device)
        shard_blocks(model, init_device_mesh(device, (1,)), precision="bf16-mixed", arch="decoder")
        seen = []
        model.backbone.blocks[0].ffn.up.register_forward_hook(
            lambda module, args, out: seen.append((module.weight.dtype, out.dtype))
        )
        model(torch.randint(0, 40, (2, 8), device=device)).float().sum().backward()
        assert seen == [(torch.bfloat16, torch.bfloat16)]
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        assert {p.grad.dtype for p in model.parameters()} == {torch.float32}
    finally:
        dist.destroy_process_group()


@GPU
def test_bf16_mixed_fsdp_trains_and_resumes_on_a_gpu(tmp_path: Path) -> None:
    """trainer=fsdp with bf16-mixed and activation checkpointing on one GPU (FSDP2 on any
    number; one is what a single-GPU machine has): the run completes with float32 weights in
    its sharded checkpoints, and resumes from one."""
    (tmp_path / "corpus.txt").write_text(CORPUS)
    args = [
        *TINY,
        "trainer=fsdp",
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        "trainer.precision=bf16-mixed",
        "model.activation_checkpointing=true",
        "data=text",
        f"data.path={tmp_path / 'corpus.txt'}",
        "callbacks.periodic_checkpoint.every_n_train_steps=2",
    ]
    run_dir = tmp_path / "run"
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], tmp_path, fresh=True)
    assert result.returncode == 0, result.output
    results = read_results(run_dir)
    assert results["status"] == "completed" and results["precision"] == "bf16-mixed"
    state = read_checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert all(t.dtype == torch.float32 for t in state["state_dict"].values())
    resumed = tmp_path / "resumed"
    step2 = run_dir / "checkpoints" / "step-0000002.ckpt"
    result = run_cli(
        [*args, f"hydra.run.dir={resumed}", f"ckpt_path={step2}"], tmp_path, fresh=True
    )
    assert result.returncode == 0, result.output
    assert read_results(resumed)["step"] == 4
    shutil.rmtree(tmp_path / ".cache", ignore_errors=True)
