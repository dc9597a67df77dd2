"""Positional schemes on tiny Shakespeare: which learns best, and which carries past the length
it trained on?

    python benchmarks/experiment_positions.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (4 layers, d 128, block 64, char tokens) with each
of the six positional schemes and --seeds seeds, compares their validation loss with 95% t
intervals and Welch tests against learned positions (Holm-corrected, as `xfmr-compare
--baseline pos=learned` does), then evaluates every run on the whole validation split at 1x, 2x
and 4x the trained block and draws the loss by position. Writes docs/experiments/positions.md.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from common.pages import (
    Page,
    arguments,
    compared_table,
    markdown_table,
    plot_axes,
    shown_block,
    trained,
)

SCHEMES = ("learned", "sinusoidal", "relative", "rotary", "alibi", "none")
LENGTHS = (1, 2, 4)  # times the trained block
SMOOTHING = 8  # positions per point of the by-position plot's smoothed lines


def main() -> None:
    args = arguments("positions", __doc__, steps=1000, seeds=3)
    block = 16 if args.quick else 64
    print(f"positions: {len(SCHEMES)} schemes x {args.seeds} seeds x {args.steps} steps")
    runs = {
        (pos, seed): trained(
            args.runs / f"{pos}-seed{seed}",
            [
                "experiment=nanogpt_shakespeare_char",
                f"data.path={args.data}",
                f"pos={pos}",
                f"seed={seed}",
                f"trainer.max_steps={args.steps}",
                f"trainer.val_check_interval={max(args.steps // 10, 1)}",
                "data.val_batches=50",
                f"data.block_size={block}",
            ],
            quick=args.quick,
        )  # fmt: skip
        for pos in SCHEMES
        for seed in range(1, args.seeds + 1)
    }
    page = Page(args, "positions", "Positional schemes: learning and length", QUESTION)
    compared = comparison(page, list(runs.values()))
    by_length = evaluations(runs, block)
    lengths(page, by_length, block)
    page.add(conclusions(compared, by_length, block))
    page.write(list(runs.values()))


QUESTION = """\
Do the six positional schemes learn equally well in a small character-level GPT, and do
relative, rotary and ALiBi positions (and sinusoids, and no positions at all) carry past the
length the model trained on, where learned positions cannot? Each scheme is set in
`experiment=nanogpt_shakespeare_char`, nothing else changed (sinusoids are drawn at the token
embeddings' starting scale, `model.init_std`, so they do not drown the tokens)."""


def comparison(page: Page, runs: list[Any]) -> Any:
    """The validation loss per scheme, with intervals and tests against learned."""
    import xfmr
    from xfmr.runs.compare.figures import metric_curves, save_curves_png
    from xfmr.runs.compare.runs import find_runs

    frame = xfmr.compare(runs, metric="val/loss", group_by="pos", baseline="pos=learned")
    page.add(
        "## Validation loss",
        "Final validation loss of each run (validated every 10th of the run, on 50 batches of windows "
        "spread evenly over the validation split, the same for every run), per scheme: mean, "
        "95% t interval over seeds, and the difference to learned positions with its interval "
        "and t-test p-value (paired over the seeds both ran, else Welch's), Holm-corrected "
        "over the five comparisons "
        "(`xfmr-compare RUNS --group-by pos --baseline pos=learned`).",
        compared_table(frame, ["pos"], timing=False),  # the question is loss, not speed
    )
    path = page.figures / "curves.png"
    save_curves_png(metric_curves(find_runs([run.path for run in runs]), "val/loss", ["pos"]),
                    "val/loss", path)  # fmt: skip
    page.add(
        f"![validation loss per scheme]({page.figures.name}/{path.name})\n\n"
        "*validation loss per scheme: mean over seeds, band ± 1 std, each seed faint*"
    )
    return frame


def evaluations(runs: dict[tuple[str, int], Any], block: int) -> dict[tuple[str, int], list]:
    """For each scheme and length, each seed's (loss, by-position rows) on the whole validation
    split, or the one-line refusal when the scheme cannot run at that length."""
    from xfmr.errors import UserError

    found: dict[tuple[str, int], list] = {}
    for (pos, _seed), run in runs.items():
        for times in LENGTHS:
            out = run.path / f"eval-{block * times}.json"
            try:
                report = _evaluated(run, block * times, out)
            except UserError as e:
                found.setdefault((pos, times), []).append(str(e))
                continue
            rows = _by_position(Path(report["by_position"]["csv"]))
            found.setdefault((pos, times), []).append((report["loss"], rows))
    return found


def _evaluated(run: Any, length: int, out: Path) -> dict:
    """The run's evaluation at `length` on the whole validation split: the report an earlier
    call wrote after the run ended, else a new one."""
    if out.is_file() and out.stat().st_mtime >= (run.path / "results.json").stat().st_mtime:
        return json.loads(out.read_text())
    return run.evaluate(data={"block_size": length, "val_batches": None}, out=out)


def _by_position(path: Path) -> list[tuple[float, int]]:
    with path.open() as f:
        return [(float(r["loss"]) if r["loss"] else math.nan, int(r["targets"]))
                for r in csv.DictReader(f)]  # fmt: skip


def lengths(page: Page, by_length: dict[tuple[str, int], list], block: int) -> None:
    """The table of losses at each length and the loss-by-position plot at the longest."""
    header = ["pos", *(f"{block * t} ({t}x)" for t in LENGTHS),
              f"4x: positions < {block}", f"4x: positions >= {block}"]  # fmt: skip
    rows = []
    for pos in SCHEMES:
        row: list[Any] = [pos]
        for times in LENGTHS:
            row.append(_cell([e[0] for e in by_length[(pos, times)] if not isinstance(e, str)]
                             , by_length[(pos, times)]))  # fmt: skip
        longest = [e[1] for e in by_length[(pos, LENGTHS[-1])] if not isinstance(e, str)]
        row.append(_cell([_span(r, 0, block) for r in longest], by_length[(pos, LENGTHS[-1])]))
        row.append(_cell([_span(r, block, None) for r in longest], by_length[(pos, LENGTHS[-1])]))
        rows.append(row)
    refusals = {e for entries in by_length.values() for e in entries if isinstance(e, str)}
    page.add(
        "## Past the trained length",
        f"Loss on the whole validation split in windows of 1x, 2x and 4x the trained block of "
        f"{block} (`xfmr-eval run_dir=RUN data.block_size=N data.val_batches=null`): mean ± "
        "95% t interval over seeds. The last two columns split the 4x windows' loss at the "
        "trained length: positions the model saw in training, and positions past them.",
        markdown_table(header, rows),
    )
    if refusals:  # one of them: they differ only in the length asked for
        page.add(f"Refused, in xfmr-eval's words:\n\n{shown_block(min(refusals))}")
    page.figure(_plot(by_length, block), "by_position", f"loss by position in windows of "
                f"{4 * block} tokens, mean over seeds (faint) and its mean over {SMOOTHING} "
                f"positions; trained at {block} (dashed); learned positions cannot run past "
                "it")  # fmt: skip


def _span(rows: list[tuple[float, int]], start: int, stop: int | None) -> float:
    """The target-weighted mean loss of positions [start, stop)."""
    chosen = rows[start:stop]
    return sum(loss * n for loss, n in chosen) / sum(n for _, n in chosen)


def _cell(values: list[float], entries: list) -> str:
    from xfmr.runs.compare.stats import mean_interval

    if not values:
        return "refused" if entries else "-"
    interval = mean_interval(values)
    mean = sum(values) / len(values)
    return f"{mean:.3f} ± {(interval[1] - interval[0]) / 2:.3f}" if interval else f"{mean:.3f}"


def _plot(by_length: dict[tuple[str, int], list], block: int) -> Any:
    figure, axes = plot_axes()
    top = 0.0
    for pos in SCHEMES:
        seeds = [e[1] for e in by_length[(pos, LENGTHS[-1])] if not isinstance(e, str)]
        if not seeds:
            continue
        mean = [sum(s[t][0] for s in seeds) / len(seeds) for t in range(len(seeds[0]))]
        [line] = axes.plot(range(len(mean)), mean, linewidth=0.6, alpha=0.35)
        smooth = _moving_average(mean, SMOOTHING)
        axes.plot(range(len(smooth)), smooth, color=line.get_color(), label=pos, linewidth=1.6)
        top = max(top, *smooth)
    axes.axvline(block - 0.5, color="black", linestyle="--", linewidth=1)
    axes.set(xlabel="position", ylabel="validation loss (nats)", ylim=(None, top + 0.5))
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def _moving_average(values: list[float], width: int) -> list[float]:
    """The mean of each value and the width - 1 before it (fewer at the start)."""
    return [sum(values[max(0, t - width + 1) : t + 1]) / (t + 1 - max(0, t - width + 1))
            for t in range(len(values))]  # fmt: skip


def conclusions(frame: Any, by_length: dict[tuple[str, int], list], block: int) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    means = {pos: _mean_loss(by_length, pos, 1) for pos in SCHEMES}
    ranked = sorted((v, pos) for pos, v in means.items() if v is not None)
    carry = []
    for pos in SCHEMES:
        within, past = (_mean_span(by_length, pos, 0, block), _mean_span(by_length, pos, block))
        if within is not None and past is not None:
            carry.append(f"{pos} {past - within:+.3f}")
    lines = ["## What it shows",
             "At the trained length, whole-split loss from best to worst: "
             + ", ".join(f"{pos} {v:.3f}" for v, pos in ranked) + ".",
             f"Past the trained length (4x windows, loss at positions >= {block} minus loss at "
             f"positions < {block}; near zero carries, large positive breaks): "
             + ", ".join(carry) + ". Learned positions have no row past their table: xfmr-eval "
             "refuses them rather than index past it."]  # fmt: skip
    return "\n\n".join(lines)


def _mean_loss(by_length: dict, pos: str, times: int) -> float | None:
    values = [e[0] for e in by_length[(pos, times)] if not isinstance(e, str)]
    return sum(values) / len(values) if values else None


def _mean_span(by_length: dict, pos: str, start: int, stop: int | None = None) -> float | None:
    seeds = [e[1] for e in by_length[(pos, LENGTHS[-1])] if not isinstance(e, str)]
    return sum(_span(r, start, stop) for r in seeds) / len(seeds) if seeds else None


if __name__ == "__main__":
    main()
