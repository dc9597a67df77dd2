"""A sweep on GPUs: each running job has GPUs of its own, given in its CUDA_VISIBLE_DEVICES,
and a request the GPUs cannot meet is refused before any job starts. On a machine without one,
XFMR_VISIBLE_GPUS=N stands for N GPUs (`xfmr.devices.visible_gpus`, read by nothing else); the
jobs are `sweep_app.py`'s, which only record what they were given."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from helpers import helpers_env
from helpers.cli import run_cli
from xfmr.errors import UserError
from xfmr.sweeps.gpus import GpuGroups, GpuPool, describe_groups, divide_gpus

GPUS = [str(i) for i in range(4)]


@pytest.mark.parametrize(
    ("workers", "devices", "groups"),
    [
        (1, 1, [("0", "1", "2", "3")]),
        (2, 1, [("0", "1"), ("2", "3")]),  # G/N each
        (2, 2, [("0", "1"), ("2", "3")]),  # DDP jobs of two processes
        (2, "auto", [("0", "1"), ("2", "3")]),
        (3, 1, [("0",), ("1",), ("2",)]),  # the fourth GPU stays idle
        (4, 1, [("0",), ("1",), ("2",), ("3",)]),
        (1, 4, [("0", "1", "2", "3")]),
    ],
)
def test_each_running_job_has_its_share_of_the_gpus(workers, devices, groups) -> None:
    divided = divide_gpus(GPUS, workers, devices)
    assert divided == GpuGroups(tuple(groups))
    held = [d for group in divided.groups for d in group]
    assert len(held) == len(set(held))  # no GPU in two groups


def test_the_gpus_are_the_visible_ones_not_the_first() -> None:
    assert divide_gpus(["4", "6"], 2, 1).groups == (("4",), ("6",))


def test_without_gpus_nothing_changes() -> None:
    assert divide_gpus([], 8, 4) is None


@pytest.mark.parametrize(
    ("workers", "devices", "share", "says"),
    [
        (5, 1, False, "hydra.sweeper.workers=5 runs 5 jobs at once on 4 GPU(s)"),
        (2, 4, False, "trainer.devices=4 x hydra.sweeper.workers=2 needs 8 GPUs"),
        (3, 2, False, "trainer.devices=2 x hydra.sweeper.workers=3 needs 6 GPUs"),
        (1, 5, False, "trainer.devices=5 asks for 5 GPUs per job, but 4 are visible"),
        (8, 5, True, "trainer.devices=5 asks for 5 GPUs per job, but 4 are visible"),
    ],
)
def test_a_request_the_gpus_cannot_meet_is_refused_naming_the_keys(
    workers, devices, share, says
) -> None:
    with pytest.raises(UserError) as refused:
        divide_gpus(GPUS, workers, devices, share=share)
    message = str(refused.value)
    assert says in message and "\n" not in message
    assert "use " in message  # and what would do


def test_jobs_share_gpus_only_when_asked_fewest_jobs_to_a_gpu_first() -> None:
    groups = divide_gpus(GPUS[:2], 5, 1, share=True)
    assert groups == GpuGroups((("0",), ("1",)), shared=True)
    pool = GpuPool(groups)
    with pool.held() as a, pool.held() as b, pool.held() as c:
        assert (a, b, c) == (("0",), ("1",), ("0",))
    with pool.held() as again:
        assert again == ("0",)  # all were given back


@pytest.mark.parametrize(
    ("groups", "said"),
    [
        (GpuGroups((("0",),)), "each job trains on GPU 0"),  # not "GPUs per job 0"
        (GpuGroups((("0", "1"), ("2", "3"))), "up to 2 jobs at once, each on GPUs of its own: "
         "GPUs 0,1 | GPUs 2,3"),
        (GpuGroups((("0",), ("1",)), shared=True), "jobs share the GPUs, several at once on "
         "each of: GPU 0 | GPU 1"),
    ],
)  # fmt: skip
def test_the_sweep_names_the_gpus_each_job_gets_as_devices(groups, said) -> None:
    assert describe_groups(groups) == said


def test_a_group_given_back_is_taken_by_the_next_job() -> None:
    pool = GpuPool(divide_gpus(GPUS, 2, 1))
    with pool.held() as first:
        with pool.held() as second:
            assert set(first).isdisjoint(second)
        with pool.held() as third:
            assert third == second


def _sweep(tmp_path: Path, *overrides: str, gpus: int, trainer: str = "{devices: 1}"):
    from helpers.sweep_app import APP_CONFIG

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "app.yaml").write_text(f"{APP_CONFIG}trainer: {trainer}\n")
    sweep = tmp_path / "sweep"
    args = ["--config-dir", str(conf), "--config-name", "app", "-m", f"hydra.sweep.dir={sweep}"]
    env = {**helpers_env(), "XFMR_VISIBLE_GPUS": str(gpus)}
    result = run_cli([*args, *overrides], tmp_path, module="helpers.sweep_app", env=env)
    jobs = []
    if (sweep / "sweep.json").is_file():
        for job in json.loads((sweep / "sweep.json").read_text())["jobs"]:
            jobs.append(json.loads((Path(job["dir"]) / "results.json").read_text()))
    return result, jobs


def test_two_jobs_running_at_once_never_hold_the_same_gpu(tmp_path: Path) -> None:
    result, jobs = _sweep(tmp_path, "x=1,2,3,4", "+sleep=1", "hydra.sweeper.workers=2", gpus=4)
    assert result.returncode == 0, result.output
    assert (
        "sweep: up to 2 jobs at once, each on GPUs of its own: GPUs 0,1 | GPUs 2,3" in result.output
    )
    assert len(jobs) == 4
    assert {job["cuda_visible_devices"] for job in jobs} == {"0,1", "2,3"}
    overlapped = 0
    for a, b in combinations(jobs, 2):
        if a["started"] < b["ended"] and b["started"] < a["ended"]:  # running at once
            overlapped += 1
            assert set(a["cuda_visible_devices"].split(",")).isdisjoint(
                b["cuda_visible_devices"].split(",")
            )
    assert overlapped  # the sweep did run two jobs at once


def test_more_workers_than_gpus_is_refused_before_any_job_starts(tmp_path: Path) -> None:
    result, jobs = _sweep(tmp_path, "x=1,2,3", "hydra.sweeper.workers=3", gpus=2)
    assert result.returncode != 0
    assert "hydra.sweeper.workers=3 runs 3 jobs at once on 2 GPU(s)" in result.output
    assert "hydra.launcher.share_gpus=true" in result.output
    assert "Traceback" not in result.output and not jobs


def test_a_cpu_sweep_gives_its_jobs_no_gpus(tmp_path: Path) -> None:
    result, jobs = _sweep(
        tmp_path, "x=1,2,3", "hydra.sweeper.workers=3", gpus=2, trainer="{accelerator: cpu}"
    )
    assert result.returncode == 0, result.output
    assert [job["cuda_visible_devices"] for job in jobs] == [None] * 3


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two CUDA GPUs")
def test_a_real_two_gpu_sweep_runs_one_job_per_gpu(tmp_path: Path, corpus: Path) -> None:
    from helpers.runs import TINY

    sweep = tmp_path / "sweep"
    args = [*TINY, "data=text", f"data.path={corpus}", "trainer.accelerator=gpu"]
    args += ["-m", "seed=1,2,3,4", "hydra.sweeper.workers=2", f"hydra.sweep.dir={sweep}"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.output
    jobs = json.loads((sweep / "sweep.json").read_text())["jobs"]
    given = [json.loads((Path(j["dir"]) / "results.json").read_text()) for j in jobs]
    share = _gpu_count() // 2
    for results in given:
        assert len(results["cuda_visible_devices"].split(",")) == share
        assert results["precision"] in ("bf16-mixed", "16-mixed")  # auto, on a GPU
    assert len({r["cuda_visible_devices"] for r in given}) == 2


def test_visible_gpus_come_from_the_simulation_then_cuda_visible_devices(monkeypatch) -> None:
    from xfmr.devices import visible_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert visible_gpus() == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,-1,4")  # CUDA stops at the first invalid id
    assert visible_gpus() == ["3"]
    monkeypatch.setenv("XFMR_VISIBLE_GPUS", "3")
    assert visible_gpus() == ["0", "1", "2"]
    monkeypatch.setenv("XFMR_VISIBLE_GPUS", "many")
    with pytest.raises(ValueError, match="XFMR_VISIBLE_GPUS='many'"):
        visible_gpus()
