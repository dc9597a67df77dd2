"""`xfmr-eval`: loss and perplexity of a trained run on the validation split of its data (or of
other files given as `data.KEY=VALUE`), and corpus BLEU of its decoded outputs for seq2seq runs.
A causal LM's loss is also given by position in the window, at the trained `data.block_size` or
a longer one (every scheme but learned positions runs past the length it trained on).

Writes eval.json (`out=`) and the outputs beside it; prints a short summary. Arguments, the run
directory, the data overrides and `generation.*` are checked before torch loads.

With `tasks=a,b`, lm-evaluation-harness tasks instead (the `eval` extra; `xfmr.evaluate`):
lm-eval's report to RUN/lm_eval.json, each score into results.json as eval/TASK/METRIC.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, parse_args, progress
from xfmr.errors import DiskFull, UserError
from xfmr.run_dir.files import locate_run

PROG = "xfmr-eval"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="eval",
    summary=(
        "loss, perplexity and (seq2seq) BLEU of a trained run on a validation split; with "
        "tasks=, lm-eval tasks."
    ),
    examples=(
        "xfmr-eval run_dir=RUN",
        "xfmr-eval run_dir=RUN checkpoint=averaged generation=beam generation.num_beams=4",
        "xfmr-eval run_dir=RUN data.val_source=test.de data.val_target=test.en out=test.json",
        "xfmr-eval run_dir=RUN data.path=other.txt        (a text run: its tail val_fraction)",
        "xfmr-eval run_dir=RUN data.val_batches=200       (a text run: an estimate on 200 batches)",
        "xfmr-eval run_dir=RUN data.block_size=256        (a causal LM past its trained length)",
        "xfmr-eval run_dir=RUN tasks=NAME,NAME limit=100  (lm-eval tasks: pip install 'xfmr[eval]')",
        "xfmr-eval run_dir=RUN tasks=mine tasks_dir=DIR   (your own lm-eval task YAMLs)",
    ),
    groups=("generation",),
    text_keys=("tasks",),  # comma-separated names, not a Hydra sweep
    open_sections=("data",),
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


def task_summary(metrics: dict[str, float]) -> str:
    """One line per score added to results.json."""
    return "\n".join(f"{name} {value:.4f}" for name, value in metrics.items()) or "no scores"


def score_tasks(cfg: DictConfig) -> None:
    """tasks=: lm-eval tasks on the run; checked (names, settings, lm-eval installed) before
    torch loads."""
    from xfmr.api.runs import Run
    from xfmr.run_dir.files import LM_EVAL_FILE, RESULTS_FILE

    try:
        locate_run(cfg.run_dir, cfg.checkpoint)
        run = Run(cfg.run_dir)
        metrics = run.evaluate_tasks(
            cfg.tasks,
            tasks_dir=cfg.tasks_dir,
            limit=cfg.limit,
            batch_size=cfg.batch_size,
            num_fewshot=cfg.num_fewshot,
            checkpoint=cfg.checkpoint,
            device=cfg.device,
        )
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    print(task_summary(metrics))
    print(f"wrote {run.path / LM_EVAL_FILE} and the scores into {run.path / RESULTS_FILE}")


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    if cfg.tasks is not None:
        score_tasks(cfg)
        return
    from xfmr.api.runs import Run

    try:
        locate_run(cfg.run_dir, cfg.checkpoint)  # before anything loads
        run = Run(cfg.run_dir)
        report = run.evaluate(
            data=OmegaConf.to_container(cfg.data, resolve=True)
            if OmegaConf.is_config(cfg.data)
            else cfg.data,
            checkpoint=cfg.checkpoint,
            generation=cfg.generation,
            device=cfg.device,
            seed=cfg.seed,
            bleu=cfg.bleu,
            by_position=cfg.by_position,
            out=cfg.out,
            progress=progress,
        )
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    print(summary(report))
    print(written(run.report_path(cfg.out), report))


if __name__ == "__main__":
    main()
