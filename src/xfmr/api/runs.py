"""A run directory as a Python object: what it says (status, results, history, config) and what
the command line does with it. `xfmr-generate`, `-eval` (and its tasks=, `evaluate`), `-attention`, `-export` and `-average`
call these methods too: each sequence (find the run and its checkpoint, read its config, check
what was asked, load it, write the result) is written here once, over `xfmr.runs`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from xfmr.api.composing import tool_config
from xfmr.config import RunConfig
from xfmr.errors import UserError
from xfmr.generation.config import GenerationConfig, generation_settings
from xfmr.run_dir.files import (
    CONFIG_FILE,
    EVAL_FILE,
    EXPORT_FILE,
    HF_FOLDER,
    RESULTS_FILE,
    SHARDED_STATE_FILE,
    check_export_format,
    locate_run,
    run_directory,
)

# Where a command's progress goes: called with (total, description), a context manager that
# gives a function taking how many were done (`xfmr.cli.keyvalue.progress` draws a bar).
Progress = Callable[[int, str], AbstractContextManager[Callable[[int], None]]]


@contextmanager
def no_progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    yield lambda done: None


class Run:
    """A directory written by `xfmr-train` or `xfmr.train`.

    What it says is read from its files whenever asked, so a run still training, or resumed
    since, reads as it is now. Loaded models are kept per checkpoint file and device, until
    that file changes.

    Attributes:
        path: the run directory.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = run_directory(path).absolute()
        if not (self.path / CONFIG_FILE).is_file():
            locate_run(self.path)  # the command line's message: what the directory holds
        self._loaded: dict[tuple[Any, ...], Any] = {}

    def __repr__(self) -> str:
        results = self.results
        metric = results.get("optimized_metric") or "val/loss"
        value = (results.get("metrics") or {}).get(metric)
        shown = f", {metric}={value:.4g}" if isinstance(value, int | float) else ""
        step = f", step={results['step']}" if "step" in results else ""
        return f"Run('{self.path}', status={self.status}{step}{shown})"

    @property
    def results(self) -> dict[str, Any]:
        """results.json, as the run wrote it at its end; empty while it has not ended."""
        path = self.path / RESULTS_FILE
        return json.loads(path.read_text()) if path.is_file() else {}

    @property
    def status(self) -> str | None:
        """completed, pruned, failed or interrupted; None while it has not ended."""
        return self.results.get("status")

    @property
    def metrics(self) -> dict[str, float | None]:
        """The final value of each metric."""
        return self.results.get("metrics") or {}

    @property
    def config(self) -> RunConfig:
        """The config it was trained with, read from its config.yaml into a typed
        `xfmr.config.RunConfig` (`run.config.optim.lr`)."""
        return RunConfig.read(self.path / CONFIG_FILE)

    @property
    def overrides(self) -> list[str]:
        """The overrides it was trained with, as results.json records them."""
        return list(self.results.get("overrides") or [])

    @property
    def history(self) -> Any:
        """A pandas DataFrame with a row per validation, indexed by step, a column per metric."""
        import pandas as pd

        rows = self.results.get("history") or []
        return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame()

    def generate(
        self,
        text: str | Sequence[str],
        *,
        generation: str | Mapping[str, Any] = "greedy",
        checkpoint: str | Path | None = None,
        device: str = "cpu",
        names: Sequence[str] | None = None,
        progress: Progress = no_progress,
        **settings: Any,
    ) -> Any:
        """What the run writes for `text`, as `xfmr-generate` does: a decoder continues it, an
        encoder-decoder translates it, an MLM encoder fills its [MASK]s.

        Args:
            text: one input, or a list of them.
            generation: greedy, beam or sample (the `generation` group), or a whole
                `generation` section.
            checkpoint: best, last, averaged or a path; None: best, else last.
            device: cpu, cuda or auto.
            names: what messages call each input (default "input", "input 0", ...).
            progress: a bar over the inputs, when there are more than one batch of them.
            **settings: `generation.*` keys, e.g. `max_new_tokens=50`, `num_beams=4`.

        Returns:
            For one input, its text (a list of n_best texts when `n_best` > 1); for a list,
            a list of those.
        """
        from xfmr.runs.inference import generate_texts

        texts = [text] if isinstance(text, str) else list(text)
        config, batch_size = _generation(generation, settings)
        if names is None:
            names = (
                ["input"] if isinstance(text, str) else [f"input {i}" for i in range(len(texts))]
            )
        run = self._load(checkpoint, device)
        bar = progress(len(texts), "generating") if len(texts) > batch_size else nullcontext()
        with bar as advance:
            outputs = generate_texts(
                run, texts, names, config=config, batch_size=batch_size, on_batch=advance
            )
        answers = [hypotheses[0] if len(hypotheses) == 1 else hypotheses for hypotheses in outputs]
        return answers[0] if isinstance(text, str) else answers

    def evaluate(
        self,
        *,
        data: Mapping[str, Any] | None = None,
        checkpoint: str | Path | None = None,
        generation: str | Mapping[str, Any] = "greedy",
        device: str = "cpu",
        seed: int = 0,
        bleu: bool = True,
        by_position: bool | None = None,
        out: str | Path | None = None,
        progress: Progress = no_progress,
        **settings: Any,
    ) -> dict[str, Any]:
        """`xfmr-eval`: loss, perplexity or the objective's metrics on the validation split
        (and corpus BLEU for seq2seq), written to `out` (default RUN/eval.json) and returned.

        Args:
            data: overrides of the run's data keys, e.g. `{"val_path": "test.tsv"}`, or
                `{"block_size": 256}` for a causal LM past the length it trained on.
            by_position: a causal LM's loss at each position, as a CSV and a plot beside the
                report (None: for every causal LM).
            **settings: `generation.*` keys for seq2seq decoding.
        """
        from xfmr.files import write_json
        from xfmr.runs.evaluation import evaluation_report
        from xfmr.runs.evaluation_data import check_length, data_with_overrides, wants_by_position

        files = locate_run(self.path, checkpoint)
        config, batch_size = _generation(generation, settings)
        run_config = self.config
        data_config = data_with_overrides(run_config, data or {})
        check_length(run_config, data_config)
        scored_by_position = wants_by_position(by_position, run_config)
        report = evaluation_report(
            self._load(files.checkpoint, device),
            data_config,
            config=config,
            batch_size=batch_size,
            seed=seed,
            bleu=bleu,
            report_path=self.report_path(out),
            by_position=scored_by_position,
            progress=progress,
        )
        write_json(self.report_path(out), report)
        return report

    def evaluate_tasks(
        self,
        tasks: str | Sequence[str],
        *,
        tasks_dir: str | Path | None = None,
        limit: int | float | None = None,
        batch_size: int = 16,
        num_fewshot: int | None = None,
        checkpoint: str | Path | None = None,
        device: str = "cpu",
    ) -> dict[str, float]:
        """`xfmr-eval tasks=`: lm-evaluation-harness tasks (`xfmr.evaluate`), scored on the run's
        model as it is, with no conversion. Writes lm-eval's report to RUN/lm_eval.json and
        returns the scores it adds to results.json's metrics, `eval/<task>/<metric>`."""
        from xfmr.evaluation.checks import check_task_settings, require_lm_eval, task_names

        names = task_names(tasks)
        check_task_settings(limit=limit, batch_size=batch_size, num_fewshot=num_fewshot)
        require_lm_eval()
        from xfmr.evaluation.harness import run_tasks

        return run_tasks(
            self._load(checkpoint, device),
            names,
            tasks_dir=tasks_dir,
            limit=limit,
            batch_size=batch_size,
            num_fewshot=num_fewshot,
        )

    def report_path(self, out: str | Path | None = None) -> Path:
        """Where `evaluate` writes its report: `out`, else RUN/eval.json."""
        return Path(out).expanduser() if out else self.path / EVAL_FILE

    def attention(
        self,
        text: str,
        *,
        checkpoint: str | Path | None = None,
        device: str = "cpu",
        out: str | Path | None = None,
        **settings: Any,
    ) -> list[Any]:
        """`xfmr-attention`: every head's attention over `text` (an encoder-decoder: also over
        its greedy output), as `AttentionMap` objects with `.weights` (queries x keys), the
        tokens, and `.figure()`, a heatmap a notebook shows. With `out`, also one PNG per map
        there.
        """
        from xfmr.runs.attention import attention_maps, save_heatmaps

        if not text:
            raise UserError("input is not set: give input=TEXT, the text whose attention to draw")
        config, _ = _generation(settings.pop("generation", "greedy"), settings)
        maps = attention_maps(self._load(checkpoint, device), text, config=config)
        if out is not None:
            save_heatmaps(maps, Path(out).expanduser())
        return maps

    def export(
        self,
        out: str | Path | None = None,
        *,
        format: str = "safetensors",
        checkpoint: str | Path | None = None,
    ) -> Path:
        """`xfmr-export`: the weights as .safetensors beside the tokenizer (default
        RUN/model.safetensors), or `format="hf"`, a folder transformers loads (default
        RUN/hf). Returns what was written."""
        return Path(self.exported(out, format=format, checkpoint=checkpoint)["out"])

    def exported(
        self,
        out: str | Path | None = None,
        *,
        format: str = "safetensors",
        checkpoint: str | Path | None = None,
    ) -> dict[str, Any]:
        """`export`, and what it wrote: the file or folder (`out`), the checkpoint, and the
        tensors (safetensors) or the HF class and files (hf)."""
        check_export_format(format)
        files = locate_run(self.path, checkpoint)
        if format == "hf":
            from xfmr.runs.export_hf import export_hf

            folder = Path(out).expanduser() if out else self.path / HF_FOLDER
            return export_hf(files.run_dir, folder, checkpoint=str(files.checkpoint))
        from xfmr.runs.export import export_run

        target = Path(out).expanduser() if out else self.path / EXPORT_FILE
        return {**export_run(files, target), "checkpoint": str(files.checkpoint)}

    def average(self, *, last: int = 5, out: str | Path | None = None) -> dict[str, Any]:
        """`xfmr-average`: the mean of the run's `last` newest periodic checkpoints, written
        to checkpoints/averaged.ckpt (or `out`); what was averaged, and where it went."""
        from xfmr.run_dir.files import periodic_checkpoints

        if isinstance(last, bool) or not isinstance(last, int) or last < 1:
            raise UserError(f"last={last!r} must be a positive integer (how many to average)")
        periodic_checkpoints(self.path, at_least=last)
        from xfmr.runs.averaging import average_checkpoints

        return average_checkpoints(self.path, last=last, out=out)

    def _load(self, checkpoint: str | Path | None, device: str) -> Any:
        """The run loaded as `xfmr.runs.loading.load_run` loads it, kept while its checkpoint
        file is unchanged."""
        from xfmr.runs.loading import load_run

        files = locate_run(self.path, checkpoint)
        # A sharded checkpoint's folder: its state file, renamed in with the shards.
        stamp = files.checkpoint / SHARDED_STATE_FILE if files.checkpoint.is_dir() else None
        stat = (stamp or files.checkpoint).stat()
        key = (str(files.checkpoint), stat.st_mtime_ns, stat.st_size, device)
        if key not in self._loaded:
            self._loaded.clear()  # one model at a time: a notebook's memory is the machine's
            self._loaded[key] = load_run(self.path, checkpoint=files.checkpoint, device=device)
        return self._loaded[key]


def open_run(path: str | Path) -> Run:
    """The run in `path`, a directory written by `xfmr-train` or `xfmr.train`."""
    return Run(path)


def evaluate(run: Run | str | Path, *, tasks: str | Sequence[str], **settings: Any) -> dict:
    """lm-evaluation-harness tasks on `run` (a `Run` or its directory), as `xfmr-eval
    tasks=` runs them: `Run.evaluate_tasks`, whose keywords (tasks_dir, limit, batch_size,
    num_fewshot, checkpoint, device) it takes. Returns the scores added to results.json."""
    return (run if isinstance(run, Run) else Run(run)).evaluate_tasks(tasks, **settings)


def _generation(
    choice: str | Mapping[str, Any], settings: dict[str, Any]
) -> tuple[GenerationConfig, int]:
    """The `generation` group's choice (or a whole section, as a command composed it) with
    `generation.*` settings, checked as the command line checks them."""
    if isinstance(choice, Mapping):
        section = OmegaConf.create(dict(choice))
    else:
        section = tool_config("generate", [f"generation={choice}"]).generation
    try:
        section = OmegaConf.merge(section, settings)
    except OmegaConfBaseException:
        unknown = sorted(set(settings) - set(section))
        raise UserError(
            f"generation.{unknown[0] if unknown else '?'} is not a generation setting; valid: "
            f"{', '.join(section)}"
        ) from None
    return generation_settings(section)
