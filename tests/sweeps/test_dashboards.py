"""Dashboards that compare a sweep's runs, read back with MLflow's and TensorBoard's own readers:
the flat config as parameters, the compared metrics with the run's real values, and how each
run ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from helpers.cli import run_cli
from helpers.runs import TINY, read_results

pytestmark = pytest.mark.usefixtures("one_thread")


def _text(corpus: Path) -> list[str]:
    return [*TINY, "data=text", f"data.path={corpus}"]


def _leaf_keys(node: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in node.items():
        if isinstance(value, dict) and value:
            keys |= _leaf_keys(value, f"{prefix}{key}.")
        elif not isinstance(value, dict):
            keys.add(f"{prefix}{key}")
    return keys


def test_mlflow_sweep_shares_one_experiment_named_after_the_sweep(
    tmp_path: Path, corpus: Path
) -> None:
    from mlflow.tracking import MlflowClient

    sweep = tmp_path / "lr_probe"
    result = run_cli(
        ["-m", *_text(corpus), f"hydra.sweep.dir={sweep}", "logger=mlflow", "optim.lr=0.002"]
        + ["seed=1,2"],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    store = tmp_path / "outputs" / "mlflow.db"  # the default: beside the runs, in the outputs
    assert store.is_file()
    client = MlflowClient(f"sqlite:///{store}")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    assert set(experiments) == {"Default", "lr_probe"}, experiments
    assert client.search_runs([experiments["Default"]]) == []
    runs = client.search_runs([experiments["lr_probe"]])
    assert len(runs) == 2

    for run in runs:
        tags = run.data.tags
        assert tags["xfmr.sweep"] == "lr_probe"
        assert tags["xfmr.status"] == "completed"
        assert run.info.status == "FINISHED"
        job_dir = sweep / tags["xfmr.job"]
        results = read_results(job_dir)
        config = OmegaConf.to_container(OmegaConf.load(job_dir / "config.yaml"))

        params = run.data.params
        assert _leaf_keys(config) <= set(params), "one param per leaf of the run's config"
        assert params["seed"] == str(config["seed"])
        assert params["optim.lr"] == "0.002"
        assert params["model.d_model"] == str(config["model"]["d_model"])
        assert params["data.block_size"] == "16"
        assert params["tokenizer.special_tokens"] == str(config["tokenizer"]["special_tokens"])
        assert params["ckpt_path"] == "None"

        history = client.get_metric_history(run.info.run_id, "val/loss")
        validations = results["history"]
        assert [h["step"] for h in validations] == [2, 4]
        # Lightning logs a validation at the 0-based index of the batch it follows, the step
        # that batch's train/loss is logged at: validations after steps 2 and 4 are at 1 and 3.
        assert [m.step for m in history] == [h["step"] - 1 for h in validations]
        assert [m.value for m in history] == pytest.approx([h["val/loss"] for h in validations])
        assert history[-1].value == pytest.approx(results["metrics"]["val/loss"])
    assert sorted(r.data.tags["xfmr.job"] for r in runs) == ["0", "1"]
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]


def test_tensorboard_hparams_tab_compares_runs_by_their_real_metrics(
    tmp_path: Path, corpus: Path
) -> None:
    """What TensorBoard's HParams tab serves, computed by the plugin's own backend."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import (
        api_pb2,
        backend_context,
        get_experiment,
        list_session_groups,
    )

    run_dir = tmp_path / "run"
    result = run_cli(
        [*_text(corpus), f"hydra.run.dir={run_dir}", "logger=tensorboard", "optim.lr=0.003"],
        tmp_path,
    )
    assert result.returncode == 0, result.output
    results = read_results(run_dir)

    logdir = str(tmp_path)  # as `tensorboard --logdir` would be given: runs below it
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    hparams = backend_context.Context(
        base_plugin.TBContext(logdir=logdir, multiplexer=multiplexer, data_provider=provider)
    )
    request_context = context.RequestContext()

    experiment = get_experiment.Handler(
        request_context, hparams, "", api_pb2.GetExperimentRequest(include_metrics=True)
    ).run()
    declared = [m.name.tag for m in experiment.metric_infos]
    assert declared == ["val/loss", "val/ppl"]  # val/loss, the objective's, optimized_metric
    assert {"optim.lr", "model.d_model", "seed"} <= {h.name for h in experiment.hparam_infos}

    every_status = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE]
    request = api_pb2.ListSessionGroupsRequest(
        allowed_statuses=[*every_status, api_pb2.STATUS_RUNNING],
        col_params=[api_pb2.ColParams(metric=api_pb2.MetricName(tag=t)) for t in declared]
        + [api_pb2.ColParams(hparam="optim.lr")],
        start_index=0,
        slice_size=10,
    )
    response = list_session_groups.Handler(request_context, hparams, "", request).run()
    [group] = response.session_groups
    assert group.hparams["optim.lr"].number_value == pytest.approx(0.003)
    assert (
        group.hparams["model.d_model"].number_value
        == OmegaConf.load(run_dir / "config.yaml").model.d_model
    )
    [session] = group.sessions
    assert session.status == api_pb2.STATUS_SUCCESS
    shown = {m.name.tag: m.value for m in session.metric_values}
    assert shown == pytest.approx({t: results["metrics"][t] for t in declared})


def test_finish_loggers_records_each_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completed and pruned runs finished; failed and interrupted ones did not. Params are
    the flat config, a long value cut to MLflow's limit rather than refused."""
    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger
    from mlflow.tracking import MlflowClient
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    from xfmr.training.loggers import finish_loggers, log_run_params, mlflow_logger

    uri = f"sqlite:///{tmp_path / 'nested' / 'mlflow.db'}"  # its folder does not exist yet
    # Lightning's MLFlowLogger exports the URI to the environment: undo that after the test.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    values = {"optim": {"lr": 0.003}, "note": "x" * (MAX_PARAM_VAL_LENGTH + 10)}
    expected = {
        "completed": ("FINISHED", api_pb2.STATUS_SUCCESS),
        "pruned": ("FINISHED", api_pb2.STATUS_SUCCESS),
        "failed": ("FAILED", api_pb2.STATUS_FAILURE),
        "interrupted": ("KILLED", api_pb2.STATUS_FAILURE),
    }
    client = MlflowClient(uri)
    for status, (mlflow_status, tensorboard_status) in expected.items():
        mlflow = mlflow_logger(tracking_uri=uri, experiment_name="statuses", run_name=status)
        tensorboard = TensorBoardLogger(tmp_path, name=status, version="")
        trainer = L.Trainer(logger=[mlflow, tensorboard], accelerator="cpu", devices=1)
        log_run_params(trainer.loggers, values, "val/acc", ["ppl"])
        finish_loggers(trainer, status)

        run = client.get_run(mlflow.run_id)
        assert (run.info.status, run.data.tags["xfmr.status"]) == (mlflow_status, status)
        assert run.data.params["optim.lr"] == "0.003"
        assert run.data.params["note"] == "x" * MAX_PARAM_VAL_LENGTH

        events = event_accumulator.EventAccumulator(
            str(tmp_path / status), size_guidance={event_accumulator.TENSORS: 0}
        )
        events.Reload()
        content = events.PluginTagToContent(metadata.PLUGIN_NAME)
        declared = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
        assert [m.name.tag for m in declared.metric_infos] == ["val/loss", "val/ppl", "val/acc"]
        end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
        assert end.status == tensorboard_status
    experiment = client.get_experiment_by_name("statuses")
    assert len(client.search_runs([experiment.experiment_id])) == len(expected)


def test_prepare_mlflow_store_creates_the_sweeps_experiment_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a sweep's own process calls it: the composed config with its `hydra` node, Hydra's
    config not set, the store's address depending on `${hydra:runtime.cwd}`."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from mlflow.tracking import MlflowClient

    from xfmr.paths import config_dir
    from xfmr.sweeps.stores import prepare_mlflow_store

    monkeypatch.chdir(tmp_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        sweep = ["hydra.sweep.dir=sweeps/lr_search"]
        with_mlflow = compose("train", [*sweep, "logger=mlflow"], return_hydra_config=True)
        with_csv = compose("train", [*sweep, "logger=csv"], return_hydra_config=True)
    assert not HydraConfig.initialized()

    store = tmp_path / "outputs" / "mlflow.db"
    prepare_mlflow_store(with_csv)
    assert not store.exists(), "no MLflow logger, no store"
    prepare_mlflow_store(with_mlflow)
    prepare_mlflow_store(with_mlflow)
    assert not HydraConfig.initialized(), "Hydra's config is left as it was found"
    client = MlflowClient(f"sqlite:///{store}")
    assert sorted(e.name for e in client.search_experiments()) == ["Default", "lr_search"]
