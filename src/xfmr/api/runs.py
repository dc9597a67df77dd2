"""A run directory as a Python object: what it says (status, results, history, config) and what
the command line does with it (`xfmr-generate`, `-eval`, `-attention`, `-export`), through
the same checks and the same code in `xfmr.runs`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from xfmr.api.composing import tool_config
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
    def config(self) -> DictConfig:
        """The resolved config it was trained with (config.yaml)."""
        return OmegaConf.load(self.path / CONFIG_FILE)

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
        generation: str = "greedy",
        checkpoint: str | Path | None = None,
        device: str = "cpu",
        **settings: Any,
    ) -> Any:
        """What the run writes for `text`, as `xfmr-generate` does: a decoder continues it, an
        encoder-decoder translates it, an MLM encoder fills its [MASK]s.

        Args:
            text: one input, or a list of them.
            generation: greedy, beam or sample (the `generation` group).
            checkpoint: best, last, averaged or a path; None: best, else last.
            device: cpu, cuda or auto.
            **settings: `generation.*` keys, e.g. `max_new_tokens=50`, `num_beams=4`.

        Returns:
            For one input, its text (a list of n_best texts when `n_best` > 1); for a list,
            a list of those.
        """
        from xfmr.runs.inference import generate_texts

        texts = [text] if isinstance(text, str) else list(text)
        config, batch_size = _generation(generation, settings)
        run = self._load(checkpoint, device)
        names = ["input"] if isinstance(text, str) else [f"input {i}" for i in range(len(texts))]
        outputs = generate_texts(run, texts, names, config=config, batch_size=batch_size)
        answers = [hypotheses[0] if len(hypotheses) == 1 else hypotheses for hypotheses in outputs]
        return answers[0] if isinstance(text, str) else answers

    def evaluate(
        self,
        *,
        data: dict[str, Any] | None = None,
        checkpoint: str | Path | None = None,
        generation: str = "greedy",
        device: str = "cpu",
        seed: int = 0,
        bleu: bool = True,
        by_position: bool | None = None,
        out: str | Path | None = None,
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
        data_config = data_with_overrides(self.config, OmegaConf.create(data or {}))
        check_length(self.config, data_config)
        scored_by_position = wants_by_position(by_position, self.config)
        report_path = Path(out).expanduser() if out else self.path / EVAL_FILE
        report = evaluation_report(
            self._load(files.checkpoint, device),
            data_config,
            config=config,
            batch_size=batch_size,
            seed=seed,
            bleu=bleu,
            report_path=report_path,
            by_position=scored_by_position,
        )
        write_json(report_path, report)
        return report

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
            raise UserError("input is not set: give the text whose attention to draw")
        config, _ = _generation("greedy", settings)
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
        check_export_format(format)
        files = locate_run(self.path, checkpoint)
        if format == "hf":
            from xfmr.runs.export_hf import export_hf

            folder = Path(out).expanduser() if out else self.path / HF_FOLDER
            return Path(export_hf(files.run_dir, folder, checkpoint=str(files.checkpoint))["out"])
        from xfmr.runs.export import export_run

        target = Path(out).expanduser() if out else self.path / EXPORT_FILE
        return Path(export_run(files, target)["out"])

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


def _generation(choice: str, settings: dict[str, Any]) -> tuple[GenerationConfig, int]:
    """The `generation` group's choice with `generation.*` settings, checked as the command
    line checks them."""
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
