"""`xfmr-eval`: loss and perplexity of a trained run on the validation split of its data (or of
other files given as `data.KEY=VALUE`), and corpus BLEU of its decoded outputs for seq2seq runs.
A causal LM's loss is also given by position in the window, at the trained `data.block_size` or
a longer one (every scheme but learned positions runs past the length it trained on).

Writes eval.json (`out=`) and the outputs beside it; prints a short summary. Arguments, the run
directory, the data overrides and `generation.*` are checked before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, generation_settings, parse_args, progress
from xfmr.errors import DiskFull, UserError
from xfmr.files import write_json
from xfmr.run_dir.files import EVAL_FILE, RunFiles, locate_run
from xfmr.runs.evaluation_data import check_length, data_with_overrides, wants_by_position

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


def _evaluate(
    cfg: DictConfig, files: RunFiles, data_config: DictConfig, out: Path, by_position: bool
) -> dict:
    from xfmr.runs.evaluation import evaluation_report
    from xfmr.runs.loading import load_run

    settings, batch_size = generation_settings(cfg.generation)
    run = load_run(files.run_dir, checkpoint=files.checkpoint, device=cfg.device)
    return evaluation_report(
        run,
        data_config,
        config=settings,
        batch_size=batch_size,
        seed=cfg.seed,
        bleu=cfg.bleu,
        report_path=out,
        by_position=by_position,
        progress=progress,
    )


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
    past = by_position["loss_past_trained"]
    line += f", {past:.4f} at {trained}-{length - 1}, past the trained length"
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
        by_position = wants_by_position(cfg.by_position, run_config)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / EVAL_FILE
        report = _evaluate(cfg, files, data_config, out, by_position)
        write_json(out, report)
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    print(summary(report))
    print(written(out, report))


if __name__ == "__main__":
    main()
