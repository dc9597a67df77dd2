"""`xfmr-eval`: loss and perplexity of a trained run on the validation split of its data (or of
other files given as `data.KEY=VALUE`), and corpus BLEU of its decoded outputs for seq2seq runs.

Writes eval.json (`out=`) and the outputs beside it; prints a short summary. Arguments, the run
directory, the data overrides and `generation.*` are checked before torch loads.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xfmr.checks import check_data
from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, generation_settings, parse_args, progress
from xfmr.errors import DiskFull, UserError
from xfmr.files import atomic_write_text, write_json
from xfmr.run_dir.files import RunFiles, locate_run

PROG = "xfmr-eval"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="eval",
    summary="loss, perplexity and (seq2seq) BLEU of a trained run on a validation split.",
    examples=(
        "xfmr-eval run_dir=RUN",
        "xfmr-eval run_dir=RUN checkpoint=averaged generation=beam generation.num_beams=4",
        "xfmr-eval run_dir=RUN data.val_source=test.de data.val_target=test.en out=test.json",
        "xfmr-eval run_dir=RUN data.path=other.txt        (a text run: its tail val_fraction)",
        "xfmr-eval run_dir=RUN data.val_batches=200       (a text run: an estimate on 200 batches)",
    ),
    groups=("generation",),
    open_sections=("data",),
)


def data_with_overrides(run_config: DictConfig, overrides: Any) -> DictConfig:
    """The run's data section with `data.KEY=VALUE` overrides: only keys it has, and files
    that exist (checked as xfmr-train checks them)."""
    if not isinstance(overrides, DictConfig):
        raise UserError(
            f"data={overrides!r}: xfmr-eval keeps the run's data and takes overrides of its keys, "
            "e.g. data.val_source=FILE data.val_target=FILE"
        )
    data = run_config.data
    unknown = [key for key in overrides if key not in data]
    if unknown:
        target = str(data.get("_target_", "")).rsplit(".", 1)[-1]
        raise UserError(
            f"data.{unknown[0]} is not a key of this run's data ({target}); its keys: "
            f"{', '.join(k for k in data if k != '_target_')}"
        )
    merged = OmegaConf.merge(data, overrides)
    if "val_batches" in merged and "val_batches" not in overrides:
        merged.val_batches = None  # the exact figure over the whole split, unless asked
    checked = OmegaConf.merge(run_config, {"data": merged})
    check_data(checked)
    return merged


def coverage(datamodule: Any) -> dict:
    """How much of the validation split the figures read, for data that reads a budget."""
    read = getattr(datamodule, "val_coverage", None)
    return {"val_coverage": read()} if read is not None else {}


def outputs_path(report: Path) -> Path:
    """Where the decoded outputs go: beside the report, eval.json -> eval.outputs.txt."""
    return report.with_name(f"{report.stem}.outputs.txt")


def _evaluate(cfg: DictConfig, files: RunFiles, data_config: DictConfig, out: Path) -> dict:
    import torch

    from xfmr.runs.evaluation import attach_data, evaluate_loss
    from xfmr.runs.loading import load_run

    started = time.time()
    settings, batch_size = generation_settings(cfg.generation)
    run = load_run(files.run_dir, checkpoint=files.checkpoint, device=cfg.device)
    torch.manual_seed(cfg.seed)  # the objective's draws while batching (masking, corruption)
    datamodule = attach_data(run, data_config)
    loader = datamodule.val_dataloader()
    with progress(len(loader.dataset), "loss") as advance:
        metrics = evaluate_loss(run, loader, on_batch=advance)
    report = {
        "run_dir": str(files.run_dir),
        "checkpoint": str(files.checkpoint),
        "global_step": run.global_step,
        "objective": getattr(run.objective, "name", type(run.objective).__name__),
        "data": OmegaConf.to_container(data_config, resolve=True),
        "seed": cfg.seed,
        **metrics,
        **coverage(datamodule),
        "generation": {**asdict(settings), "batch_size": batch_size},
    }
    if cfg.bleu and report["objective"] == "seq2seq":
        report.update(_bleu(run, datamodule, settings, batch_size, outputs_path(out)))
    report["wall_time_s"] = round(time.time() - started, 3)
    return report


def _bleu(run: Any, datamodule: Any, settings: Any, batch_size: int, path: Path) -> dict:
    from xfmr.runs.evaluation import corpus_bleu, translate_validation

    with progress(len(datamodule.val_pairs), "decoding") as advance:
        outputs, references = translate_validation(
            run, datamodule, config=settings, batch_size=batch_size, on_batch=advance
        )
    outputs = [line.replace("\n", " ") for line in outputs]  # one output per line
    atomic_write_text(path, "".join(f"{line}\n" for line in outputs))
    return {"bleu": corpus_bleu(outputs, references), "bleu_tokenize": "13a", "outputs": str(path)}


def summary(report: dict) -> str:
    parts = [f"loss {report['loss']:.4f}"]
    if "perplexity" in report:
        parts.append(f"perplexity {report['perplexity']:.3f}")
    if "bleu" in report:
        parts.append(f"BLEU {report['bleu']:.2f}")
    return (
        f"{', '.join(parts)} on {report['examples']} examples ({report['targets']} targets), "
        f"{Path(report['checkpoint']).name} at step {report['global_step']}"
    )


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        files = locate_run(cfg.run_dir, cfg.checkpoint)
        generation_settings(cfg.generation)
        data_config = data_with_overrides(OmegaConf.load(files.config), cfg.data)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / "eval.json"
        report = _evaluate(cfg, files, data_config, out)
        write_json(out, report)
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    print(summary(report))
    print(f"wrote {out}" + (f" and {report['outputs']}" if "outputs" in report else ""))


if __name__ == "__main__":
    main()
