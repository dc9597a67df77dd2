"""`xfmr-eval run_dir=RUN tasks=...` and `xfmr.evaluate(run, tasks=...)`: lm-eval's report in
RUN/lm_eval.json, each score in results.json's metrics as eval/<task>/<metric> (centred where
the task states its chance) beside everything results.json held, and xfmr-compare showing them
as it shows any metric. Tasks come from a tasks_dir the test writes; nothing is downloaded."""

from __future__ import annotations

import gc
import json
import shutil
import sys
import time

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = "xfmr_tiny_choice"  # conftest's choice_task
CHANCE = 1 / 3


def _collected(capsys) -> None:
    """An earlier test's leftovers, collected mid-command (a notebook test's kernel client logs
    from its finalizer into a capture since closed), would print into a one-line test's stderr:
    collect them first, and drop what they print."""
    gc.collect()
    capsys.readouterr()


def _eval_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from xfmr.cli import eval as eval_cli

    monkeypatch.setattr(sys, "argv", ["xfmr-eval", *args])
    code = 0
    try:
        eval_cli.main()
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def run_copy(decoders, tmp_path):
    def copy(family: str, name: str):
        return shutil.copytree(decoders(family)[0], tmp_path / name)

    return copy


def test_cli_writes_lm_eval_json_and_adds_scores_to_results(
    monkeypatch, capsys, run_copy, choice_task
) -> None:
    run = run_copy("gpt2", "run")
    before = json.loads((run / "results.json").read_text())
    tasks_dir = choice_task(chance=CHANCE)
    code, out, err = _eval_cli(
        monkeypatch, capsys, f"run_dir={run}", f"tasks={TASK}", f"tasks_dir={tasks_dir}",
        "limit=4", "batch_size=2",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((run / "lm_eval.json").read_text())
    scores = report["results"][TASK]
    assert report["n-samples"][TASK]["effective"] == 4
    results = json.loads((run / "results.json").read_text())
    metrics = results["metrics"]
    assert metrics[f"eval/{TASK}/acc"] == scores["acc,none"]
    assert metrics[f"eval/{TASK}/acc_norm"] == scores["acc_norm,none"]
    centred = (scores["acc,none"] - CHANCE) / (1 - CHANCE)
    assert metrics[f"eval/{TASK}/acc_centred"] == pytest.approx(centred)
    assert not any("stderr" in name for name in metrics)
    # Nothing results.json held is lost.
    assert {k: v for k, v in results.items() if k != "metrics"} == {
        k: v for k, v in before.items() if k != "metrics"
    }
    assert before["metrics"].items() <= metrics.items()
    assert f"eval/{TASK}/acc " in out and "lm_eval.json" in out


def _with_overrides(run, overrides: list[str]):
    """Say in results.json what the run was trained with (in-process runs record none), so
    that xfmr-compare groups the runs by setting."""
    path = run / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "overrides": overrides}))
    return run


def test_python_evaluate_and_compare_show_the_scores(run_copy, choice_task) -> None:
    import xfmr

    tasks_dir = choice_task(chance=CHANCE)
    seed0 = _with_overrides(run_copy("gpt2", "gpt2_seed0"), ["pos=learned", "seed=0"])
    seed1 = _with_overrides(run_copy("gpt2", "gpt2_seed1"), ["pos=learned", "seed=1"])
    llama = _with_overrides(run_copy("llama", "llama"), ["pos=rotary", "seed=0"])
    added = xfmr.evaluate(seed0, tasks=[TASK], tasks_dir=tasks_dir, batch_size=3)
    named = ("acc", "acc_norm", "acc_centred", "acc_norm_centred")
    assert set(added) == {f"eval/{TASK}/{m}" for m in named}
    assert xfmr.evaluate(str(seed1), tasks=TASK, tasks_dir=tasks_dir) == added
    assert (
        xfmr.evaluate(xfmr.open_run(llama), tasks=TASK, tasks_dir=tasks_dir).keys() == added.keys()
    )
    assert xfmr.open_run(seed0).overrides == ["pos=learned", "seed=0"]  # kept

    metric = f"eval/{TASK}/acc"
    table = xfmr.compare(seed0, seed1, llama, metric=metric, mode="max")
    table = table.set_index("pos")  # the setting: the override that differs, seed aside
    learned, rotary = table.loc["learned"], table.loc["rotary"]
    assert learned["n"] == 2 and rotary["n"] == 1
    assert learned[f"final {metric} mean"] == pytest.approx(added[metric])
    assert rotary[f"final {metric} mean"] == pytest.approx(xfmr.open_run(llama).metrics[metric])
    assert f"final {metric} 95% CI (t) low" in table.columns  # an interval over the seeds


def test_missing_extra_says_which_to_install(monkeypatch, capsys, decoders) -> None:
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if lm-eval were not installed
    _collected(capsys)
    code, out, err = _eval_cli(monkeypatch, capsys, f"run_dir={decoders('gpt2')[0]}", "tasks=a")
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "pip install 'xfmr[eval]'" in err


@pytest.mark.parametrize(
    ("argument", "named"),
    [("limit=0", "limit=0"), ("batch_size=0", "batch_size=0"), ("tasks=,", "tasks=")],
)
def test_bad_settings_fail_in_one_line_before_loading(
    monkeypatch, capsys, decoders, argument: str, named: str
) -> None:
    args = [f"run_dir={decoders('gpt2')[0]}", "tasks=a", argument]
    _collected(capsys)
    started = time.perf_counter()
    code, _, err = _eval_cli(monkeypatch, capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and named in err
    assert time.perf_counter() - started < 5
