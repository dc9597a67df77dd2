"""`xfmr-eval`: loss and perplexity of a trained run on the validation split of its data (or of
other files given as `data.KEY=VALUE`), and corpus BLEU of its decoded outputs for seq2seq runs.

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
from xfmr.run_dir.files import RunFiles, locate_run
from xfmr.runs.evaluation_data import data_with_overrides, outputs_path

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


def _evaluate(cfg: DictConfig, files: RunFiles, data_config: DictConfig, out: Path) -> dict:
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
        outputs=outputs_path(out),
        progress=progress,
    )


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
