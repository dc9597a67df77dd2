"""`xfmr-eval`: loss and perplexity of a trained run on the validation split of its data (or of
other files given as `data.KEY=VALUE`), and corpus BLEU of its decoded outputs for seq2seq runs.
A causal LM's loss is also given by position in the window, at the trained `data.block_size` or
a longer one (every scheme but learned positions runs past the length it trained on).

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
from xfmr.nn.config import EXTENDING_POSITIONS
from xfmr.objectives.registry import objective_facts
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
        "xfmr-eval run_dir=RUN data.block_size=256        (a causal LM past its trained length)",
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


def check_length(run_config: DictConfig, data_config: DictConfig) -> None:
    """Windows longer than the run trained on need positions past that length, which learned
    positions have only as far as their table goes."""
    length, trained = data_config.get("block_size"), run_config.data.get("block_size")
    pos = run_config.pos
    if length is None or trained is None or length <= trained or pos.name != "learned":
        return
    table = pos.get("max_positions")
    if table is not None and length > table:
        raise UserError(
            f"data.block_size={length} is longer than the {table} learned positions of this run "
            f"(pos=learned, trained at data.block_size={trained}): evaluate at data.block_size<="
            f"{table}; the schemes that run past their trained length are pos in "
            f"{list(EXTENDING_POSITIONS)}"
        )


def wants_by_position(cfg: DictConfig, run_config: DictConfig) -> bool:
    """`by_position`: null is on for causal LM runs and off for the others; true is refused
    where there is no position to score by."""
    asked = cfg.by_position
    if asked is not None and not isinstance(asked, bool):
        raise UserError(f"by_position={asked!r} must be true, false or null (clm runs only)")
    target = run_config.objective.get("_target_")
    objective = objective_facts(target).name if target else None
    if asked and objective != "clm":
        raise UserError(
            f"by_position=true scores a causal LM's loss at each position of its windows, but "
            f"this run's objective is {objective}: leave by_position unset"
        )
    return objective == "clm" and asked is not False


def coverage(datamodule: Any) -> dict:
    """How much of the validation split the figures read, for data that reads a budget."""
    read = getattr(datamodule, "val_coverage", None)
    return {"val_coverage": read()} if read is not None else {}


def outputs_path(report: Path) -> Path:
    """Where the decoded outputs go: beside the report, eval.json -> eval.outputs.txt."""
    return report.with_name(f"{report.stem}.outputs.txt")


def _evaluate(
    cfg: DictConfig, files: RunFiles, data_config: DictConfig, out: Path, by_position: bool
) -> dict:
    import torch

    from xfmr.runs.evaluation import attach_data, evaluate_loss, fit_positions
    from xfmr.runs.loading import load_run

    started = time.time()
    settings, batch_size = generation_settings(cfg.generation)
    run = load_run(files.run_dir, checkpoint=files.checkpoint, device=cfg.device)
    fit_positions(run, data_config)
    torch.manual_seed(cfg.seed)  # the objective's draws while batching (masking, corruption)
    datamodule = attach_data(run, data_config)
    loader = datamodule.val_dataloader()
    with progress(len(loader.dataset), "loss") as advance:
        metrics = evaluate_loss(run, loader, on_batch=advance, by_position=by_position)
    if by_position:
        metrics["by_position"] = _write_by_position(run, metrics["by_position"], out)
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


def _write_by_position(run: Any, by_position: dict, out: Path) -> dict:
    from xfmr.runs.by_position import by_position_paths, write_by_position

    trained = int(run.config.data.block_size)
    csv_path, png_path = by_position_paths(out)
    pos = run.model_config.pos.name
    files = write_by_position(
        by_position,
        trained=trained,
        csv_path=csv_path,
        png_path=png_path,
        title=f"{run.files.run_dir.name}: loss by position over {by_position['targets'][0]} "
        f"windows (pos={pos}, trained at {trained})",
    )
    return {"pos": pos, **files}


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
    line = (
        f"{', '.join(parts)} on {report['examples']} examples ({report['targets']} targets), "
        f"{Path(report['checkpoint']).name} at step {report['global_step']}"
    )
    if "by_position" in report:
        line += "\n" + position_summary(report["by_position"])
    return line


def position_summary(by_position: dict) -> str:
    """The loss before the trained length and past it."""
    length, trained = by_position["block_size"], by_position["trained_block_size"]
    line = (
        f"by position: loss {by_position['loss_within_trained']:.4f} at positions "
        f"0-{min(trained, length) - 1}"
    )
    if by_position["loss_past_trained"] is None:
        return line + f" (trained at {trained})"
    line += f", {by_position['loss_past_trained']:.4f} at {trained}-{length - 1}, past the trained length"
    if by_position["pos"] == "learned":  # rows no gradient reached: they keep their init
        line += " (pos=learned: positions never trained)"
    return line


def written(out: Path, report: dict) -> str:
    paths = [
        out,
        report.get("outputs"),
        *(report.get("by_position", {}).get(k) for k in ("csv", "plot")),
    ]
    shown = [str(path) for path in paths if path]
    return f"wrote {', '.join(shown[:-1])} and {shown[-1]}" if len(shown) > 1 else f"wrote {out}"


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        files = locate_run(cfg.run_dir, cfg.checkpoint)
        generation_settings(cfg.generation)
        run_config = OmegaConf.load(files.config)
        data_config = data_with_overrides(run_config, cfg.data)
        check_length(run_config, data_config)
        by_position = wants_by_position(cfg, run_config)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / "eval.json"
        report = _evaluate(cfg, files, data_config, out, by_position)
        write_json(out, report)
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    print(summary(report))
    print(written(out, report))


if __name__ == "__main__":
    main()
