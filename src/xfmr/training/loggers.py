"""Logger factories that need a decision at run time, and what xfmr sends every dashboard
beyond Lightning's per-step metrics: the flat config, the metrics a sweep's runs are compared
by, and how the run ended. Only light imports here: a sweep's own process uses this module."""

from __future__ import annotations

import netrc
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from xfmr.run_dir.files import METRICS_FILE
from xfmr.sweeps.stores import ensure_mlflow_experiment


def has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def wandb_logger(*, offline: bool | str = "auto", **kwargs: Any):
    """A Lightning `WandbLogger`; `offline="auto"` logs offline unless an API key is configured
    (`WANDB_MODE` in the environment, if set, wins). Sync later with `wandb sync DIR`."""
    from lightning.pytorch.loggers import WandbLogger

    if offline == "auto":
        offline = os.environ.get("WANDB_MODE") == "offline" or not has_wandb_credentials()
    return WandbLogger(offline=bool(offline), **kwargs)


# --- MLflow ------------------------------------------------------------------------------------


def mlflow_logger(*, tracking_uri: str, experiment_name: str, **kwargs: Any):
    """A Lightning `MLFlowLogger` whose experiment exists before its run starts (rank 0 creates
    it; DDP workers log nothing)."""
    from lightning.pytorch.loggers import MLFlowLogger
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    if rank_zero_only.rank == 0:
        ensure_mlflow_experiment(tracking_uri, experiment_name)
    return MLFlowLogger(tracking_uri=tracking_uri, experiment_name=experiment_name, **kwargs)


# --- What every dashboard gets: the config, the metrics compared, the final status ------------

# The run's status in MLflow's terms. A pruned run ended early by design, with metrics as good
# as its steps: FINISHED, as Optuna's own MLflow callback records pruned trials.
MLFLOW_STATUS = {
    "completed": "FINISHED",
    "pruned": "FINISHED",
    "failed": "FAILED",
    "interrupted": "KILLED",
}


def flat_params(values: Mapping[str, Any]) -> dict[str, Any]:
    """Each leaf of a run's config (`RunConfig.to_dict`) under its dotted path (`optim.lr`,
    `model.d_model`); a list is one leaf."""
    flat: dict[str, Any] = {}

    def visit(node: Any, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                visit(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    visit(values, "")
    return flat


def _compared_metrics(optimized_metric: str | None, val_metrics: Iterable[str]) -> list[str]:
    """The metrics a sweep's runs are compared by: val/loss, the objective's validation metrics
    and the optimized metric."""
    tags = ["val/loss", *(f"val/{name}" for name in val_metrics)]
    if optimized_metric:
        tags.append(str(optimized_metric))
    return list(dict.fromkeys(tags))


def log_run_params(
    loggers: Sequence[Any],
    values: Mapping[str, Any],
    optimized_metric: str | None,
    val_metrics: Iterable[str],
) -> None:
    """At the start of a run, so that one which fails still shows them: the flat config as
    MLflow params, and TensorBoard's hparams session with the compared metrics declared (their
    values are the run's own scalars under those tags, which the HParams tab reads).
    `val_metrics`: the objective's validation metrics, logged as `val/NAME`."""
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    if rank_zero_only.rank != 0:
        return
    params = flat_params(values)
    for logger in loggers:
        if isinstance(logger, MLFlowLogger):
            _log_mlflow_params(logger, params)
        elif isinstance(logger, TensorBoardLogger):
            _write_hparams_start(logger, params, _compared_metrics(optimized_metric, val_metrics))


def finish_loggers(trainer: Any, status: str) -> None:
    """Record the run's `status` (completed | pruned | failed | interrupted) and close each
    logger, so the next job of a multirun starts its own run (wandb keeps one per process)."""
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger

    finished = status in ("completed", "pruned")
    for logger in trainer.loggers:
        if isinstance(logger, MLFlowLogger):
            if trainer.global_rank == 0:
                logger.experiment.set_tag(logger.run_id, "xfmr.status", status)
            logger.finalize(MLFLOW_STATUS[status])
            continue
        if isinstance(logger, TensorBoardLogger) and trainer.global_rank == 0:
            _write_hparams_end(logger, finished)
        logger.finalize("success" if finished else "failed")
        if isinstance(logger, WandbLogger) and trainer.global_rank == 0:
            import wandb

            wandb.finish()


def _log_mlflow_params(logger: Any, params: dict[str, Any]) -> None:
    from mlflow.entities import Param
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    # Lightning's own log_hyperparams would cut every value at 250 characters.
    batch = [Param(key, str(value)[:MAX_PARAM_VAL_LENGTH]) for key, value in params.items()]
    for start in range(0, len(batch), MAX_PARAMS_TAGS_PER_BATCH):
        chunk = batch[start : start + MAX_PARAMS_TAGS_PER_BATCH]
        logger.experiment.log_batch(logger.run_id, params=chunk)


def _write_hparams_start(logger: Any, params: dict[str, Any], metric_tags: list[str]) -> None:
    """The HParams plugin's experiment (hyperparameters and metrics declared) and session start
    (this run's values), in the run's own event file."""
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2, summary_v2

    types = {
        bool: api_pb2.DATA_TYPE_BOOL,
        int: api_pb2.DATA_TYPE_FLOAT64,
        float: api_pb2.DATA_TYPE_FLOAT64,
        str: api_pb2.DATA_TYPE_STRING,
    }
    values = {k: v if type(v) in types else str(v) for k, v in params.items()}  # None, lists
    experiment = api_pb2.Experiment(
        hparam_infos=[
            api_pb2.HParamInfo(name=name, type=types[type(value)]) for name, value in values.items()
        ],
        metric_infos=[
            api_pb2.MetricInfo(
                name=api_pb2.MetricName(tag=tag),
                dataset_type=api_pb2.DATASET_VALIDATION
                if tag.startswith("val/")
                else api_pb2.DATASET_UNKNOWN,
            )
            for tag in metric_tags
        ],
        time_created_secs=time.time(),
    )
    _write_summaries(
        logger,
        _hparams_summary(plugin_data_pb2.HParamsPluginData(experiment=experiment)),
        summary_v2.hparams_pb(values),
    )


def _write_hparams_end(logger: Any, finished: bool) -> None:
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    end = plugin_data_pb2.SessionEndInfo(
        status=api_pb2.STATUS_SUCCESS if finished else api_pb2.STATUS_FAILURE,
        end_time_secs=time.time(),
    )
    _write_summaries(
        logger, _hparams_summary(plugin_data_pb2.HParamsPluginData(session_end_info=end))
    )


def _write_summaries(logger: Any, *summaries: Any) -> None:
    """`summaries` in the run's event file: the one the logger's SummaryWriter holds open (where
    Lightning writes its own hparams); once Lightning has closed it (its finalize when fit
    ends), a new event file in the same folder, as the SummaryWriter opens for its next event."""
    from torch.utils.tensorboard.writer import FileWriter

    experiment = logger.experiment
    closed = experiment.file_writer is None
    if closed:
        args = (experiment.max_queue, experiment.flush_secs, experiment.filename_suffix)
        writer = FileWriter(experiment.log_dir, *args)
    else:
        writer = experiment.file_writer
    for summary in summaries:
        writer.add_summary(summary)
    if closed:
        writer.close()  # flushed, and closed as Lightning left the logger's own
    else:
        writer.flush()


def _hparams_summary(data: Any) -> Any:
    """A summary holding HParams plugin data under the tag the plugin reads it from."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata

    tag = {
        "experiment": metadata.EXPERIMENT_TAG,
        "session_start_info": metadata.SESSION_START_INFO_TAG,
        "session_end_info": metadata.SESSION_END_INFO_TAG,
    }[data.WhichOneof("data")]
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
    )
    return summary


def read_csv_rows(loggers: Any) -> list[dict[str, Any]]:
    """The rows of the metrics.csv that a CSVLogger among `loggers` (the `logger` section's
    entries) would write, if any."""
    import csv

    for name in loggers:
        item = loggers.get(name)
        if not item.path.endswith("CSVLogger"):
            continue
        path = (
            Path(item.get("save_dir"))
            / str(item.get("name") or "")
            / str(item.get("version") or "")
        )
        path = path / METRICS_FILE
        if not path.is_file():
            return []
        with path.open(newline="") as file:  # values kept as written, step read as a number
            rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(file)]
        return [{**row, "step": int(row.get("step", 0))} for row in rows]
    return []
