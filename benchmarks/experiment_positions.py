"""Positional schemes on tiny Shakespeare: which learns best, and which carries past the length
it trained on?

    python benchmarks/experiment_positions.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (4 layers, d 128, block 64, char tokens) with each
of the six positional schemes and --seeds seeds, and compares each scheme's final validation
loss with learned positions', paired over the seeds both ran (as `xfmr-compare --baseline
pos=learned` pairs runs that share a seed). It then evaluates every run on the whole validation
split at 1x, 2x and 4x the trained block and, per seed, sets the loss past the trained length
in the 4x windows against the loss at the last quarter of the trained positions, which see
nearly the whole trained context. Every difference the page tests has its interval at
Bonferroni's simultaneous level over all of the page's tests and an equivalence verdict (TOST
against MARGIN). Writes docs/experiments/positions.md.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from common.family import Family, paired_at
from common.pages import (
    Page,
    arguments,
    experiment_overrides,
    markdown_table,
    plot_axes,
    shown_block,
    trained,
)
from xfmr.runs.compare.stats import mean_interval

SCHEMES = ("learned", "sinusoidal", "relative", "rotary", "alibi", "none")
BASELINE = "learned"
LENGTHS = (1, 2, 4)  # times the trained block
SMOOTHING = 8  # positions per point of the by-position plot's smoothed lines
LATE = 0.75  # the late in-window positions: from this fraction of the trained block to its end
# Fixed before the runs, for both measures: 0.05 nats is a 5% change in perplexity
# (e^0.05 = 1.05), about the smallest gap between two schemes worth choosing one for at this
# size; a difference shown to lie within it counts as none, for loss and for carrying past
# the trained length alike.
MARGIN = 0.05
TESTS = (
    "paired t-tests by seed of each scheme against learned positions (final loss and late "
    "in-window loss), each with a TOST for equivalence within ±0.05 nats; all 20 p-values "
    "Bonferroni-corrected together, intervals at the matching simultaneous level."
)


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
    by_length = evaluations(runs, block)
    finals = {pos: {seed: run.metrics["val/loss"] for (p, seed), run in runs.items()
                    if p == pos and isinstance(run.metrics.get("val/loss"), float)}
              for pos in SCHEMES}  # fmt: skip
    carried = {pos: carry(by_length, pos, block) for pos in SCHEMES}
    tests = tested(finals, carried)
    page = Page(args, "positions", "Positional schemes: learning and length", QUESTION, tests=TESTS)
    page.add("## Scope", scope(runs, block, tests))
    validation(page, runs, finals, tests)
    lengths(page, by_length, carried, tests, block)
    page.add(conclusions(finals, carried, tests, block))
    page.write(list(runs.values()))


QUESTION = """\
Do the six positional schemes learn equally well in a small character-level GPT, and do
relative, rotary and ALiBi positions (and sinusoids, and no positions at all) carry past the
length the model trained on, where learned positions cannot? Each scheme is set in
`experiment=nanogpt_shakespeare_char`, nothing else changed (sinusoids are drawn at the token
embeddings' starting scale, `model.init_std`, so they do not drown the tokens)."""


def tested(finals: dict[str, dict[int, float]], carried: dict[str, dict]) -> Family:
    """The page's tests: each scheme's final val/loss against learned's on the seeds both ran,
    and each scheme's loss past the trained length against its late in-window loss."""
    samples = {}
    for pos in SCHEMES:
        if pos != BASELINE:
            seeds = sorted(set(finals[pos]) & set(finals[BASELINE]))
            samples[("loss", pos)] = ([finals[pos][s] for s in seeds],
                                      [finals[BASELINE][s] for s in seeds])  # fmt: skip
        if carried[pos]:
            seeds = sorted(carried[pos])
            samples[("carry", pos)] = ([carried[pos][s][1] for s in seeds],
                                       [carried[pos][s][0] for s in seeds])  # fmt: skip
    return Family({key: paired_at(*pair) for key, pair in samples.items()}, MARGIN)


def scope(runs: dict[tuple[str, int], Any], block: int, tests: Family) -> str:
    run = next(iter(runs.values()))
    data = run.config.data
    seeds = sorted({seed for _, seed in runs})
    tokens = int(run.results.get("step") or 0) * int(data.batch_size) * block
    late = int(block * LATE)
    times = [r.results.get("wall_time_s") or math.nan for r in runs.values()]
    return (
        f"{len(runs)} runs: {len(SCHEMES)} schemes x seeds {', '.join(map(str, seeds))}, each "
        f"`xfmr-train {' '.join(experiment_overrides(run))}` with its own `pos=` and `seed=`: "
        f"{run.results.get('step')} steps of {data.batch_size} windows of {block} characters, "
        f"{tokens:,} tokens (characters) seen per run, from the first "
        f"{1 - float(data.val_fraction):.0%} of `{Path(str(data.path)).name}`, one run at a "
        f"time, {min(times):.0f}-{max(times):.0f} s of training each (results.json); a scheme "
        "and "
        "learned positions that share a seed share their initialisation and data order, so "
        "differences are paired by seed. Evaluated on the whole last "
        f"{float(data.val_fraction):.0%} (validation) in windows of {block}, {2 * block} and "
        f"{4 * block}. The page tests {len(tests.keys)} differences, each also for equivalence "
        f"within ±{MARGIN} nats (the margin fixed in the script before these runs, though after "
        "an earlier version of this page was read: a 5% change "
        f"in perplexity, e^{MARGIN} = {math.exp(MARGIN):.3f}, about the smallest gap worth "
        f"choosing a scheme for at this size): {tests.count} p-values, Bonferroni-corrected "
        f"together, and each difference's interval at {tests.level:.5f} "
        "(`multiplicity.simultaneous_confidence`), so that all hold together at 95% and an "
        "interval excludes 0 exactly when its corrected p is below 0.05. A TOST at the "
        f"corrected level ({(1 - tests.level):.5f} a side) shows equivalence exactly when the "
        f"narrower {1 - 2 * (1 - tests.level):.4f} interval lies within the margin, so a shown "
        "interval that reaches a little past it can still read as equivalent. Intervals on one "
        "scheme's mean are 95% t intervals over its seeds, each on its own. Late in-window "
        f"positions: {late}-{block - 1}. Machine and load: the last section."
    )


def validation(page: Page, runs: dict, finals: dict, tests: Family) -> None:
    """The final validation loss per scheme and its paired difference to learned positions."""
    from xfmr.runs.compare.figures import metric_curves, save_curves_png
    from xfmr.runs.compare.runs import find_runs

    rows = []
    for pos in sorted(SCHEMES, key=lambda p: _mean(list(finals[p].values()))):
        rows.append([pos, len(finals[pos]), _cell(list(finals[pos].values()), signed=False),
                     *tests.cells(("loss", pos))])  # fmt: skip
    header = ["pos", "n", "final val/loss (95% t interval)",
              "Δ vs learned (simultaneous interval)", "test", "p (Bonferroni)",
              f"p equivalent ±{MARGIN} (TOST, Bonferroni)", "verdict"]  # fmt: skip
    page.add(
        "## Validation loss",
        "Final validation loss of each run (validated every 10th of the run, on 50 batches of "
        "windows spread evenly over the validation split, the same for every run), per scheme: "
        "mean with its 95% t interval over seeds, and the difference to learned positions: "
        "the mean of the per-seed differences (paired: `xfmr-compare RUNS --group-by pos "
        "--baseline pos=learned` pairs the same runs), its interval at the page's simultaneous "
        "level, the paired t-test's and TOST's p-values, Bonferroni-corrected over the page's "
        "tests (Scope), and the verdict.",
        markdown_table(header, rows),
    )
    path = page.figures / "curves.png"
    save_curves_png(metric_curves(find_runs([run.path for run in runs.values()]), "val/loss",
                                  ["pos"]), "val/loss", path)  # fmt: skip
    page.drawn(
        path,
        "validation loss (nats) against training step, per scheme: mean over seeds "
        "(dots), band ± 1 std over seeds, each run a faint line (mostly within the band)",
    )


def evaluations(runs: dict[tuple[str, int], Any], block: int) -> dict[tuple[str, int], dict]:
    """For each scheme and length, each seed's (loss, by-position rows) on the whole validation
    split, or the one-line refusal when the scheme cannot run at that length."""
    from xfmr.errors import UserError

    found: dict[tuple[str, int], dict] = {}
    for (pos, seed), run in runs.items():
        for times in LENGTHS:
            out = run.path / f"eval-{block * times}.json"
            try:
                report = _evaluated(run, block * times, out)
            except UserError as e:
                found.setdefault((pos, times), {})[seed] = str(e)
                continue
            rows = _by_position(Path(report["by_position"]["csv"]))
            found.setdefault((pos, times), {})[seed] = (report["loss"], rows)
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


def _ran(by_length: dict, pos: str, times: int) -> dict[int, tuple[float, list]]:
    """Each seed's (loss, by-position rows) of `pos` at `times` the block, refusals left out."""
    return {s: e for s, e in by_length[(pos, times)].items() if not isinstance(e, str)}


def carry(by_length: dict, pos: str, block: int) -> dict[int, tuple[float, float]]:
    """Per seed, in the longest windows: (loss at the late in-window positions, loss past the
    trained length); empty where the scheme could not run there."""
    return {seed: late_and_past(rows, block)
            for seed, (_, rows) in _ran(by_length, pos, LENGTHS[-1]).items()}  # fmt: skip


def late_and_past(rows: list[tuple[float, int]], block: int) -> tuple[float, float]:
    """(loss at positions [LATE * block, block), loss at positions >= block) of one by-position
    curve. The late positions see nearly the whole trained context, as positions past it do;
    the early ones see less (the first, almost none), so their loss differs from the rest for
    want of context, not of length, and would bias a comparison with them."""
    return _span(rows, int(block * LATE), block), _span(rows, block, None)


def _span(rows: list[tuple[float, int]], start: int, stop: int | None) -> float:
    """The target-weighted mean loss of positions [start, stop)."""
    chosen = rows[start:stop]
    return sum(loss * n for loss, n in chosen) / sum(n for _, n in chosen)


def lengths(page: Page, by_length: dict, carried: dict, tests: Family, block: int) -> None:
    """The losses at each length, the late-versus-past test and the loss-by-position plot."""
    late = int(block * LATE)
    header = ["pos", *(f"{block * t} ({t}x)" for t in LENGTHS), f"4x: positions 0-{late - 1}",
              f"4x: {late}-{block - 1}", f"4x: >= {block}"]  # fmt: skip
    rows = []
    for pos in SCHEMES:
        row: list[Any] = [pos]
        for times in LENGTHS:
            refused = len(_ran(by_length, pos, times)) < len(by_length[(pos, times)])
            losses = [loss for loss, _ in _ran(by_length, pos, times).values()]
            row.append("refused" if refused and not losses else _cell(losses))
        late_past = list(carried[pos].values())
        early = [_span(curve, 0, late) for _, curve in _ran(by_length, pos, LENGTHS[-1]).values()]
        spans = [early, [lp[0] for lp in late_past], [lp[1] for lp in late_past]]
        row += [_cell(span) if span else "refused" for span in spans]
        rows.append(row)
    refusals = {e for entries in by_length.values() for e in entries.values() if isinstance(e, str)}
    page.add(
        "## Past the trained length",
        f"Loss on the whole validation split in windows of 1x, 2x and 4x the trained block of "
        f"{block} (`xfmr-eval run_dir=RUN data.block_size=N data.val_batches=null`): mean ± "
        "the half-width of its 95% t interval over seeds. The last three columns split the 4x "
        f"windows' loss by position: the first {late}, which see less context (the first few "
        f"almost none); {late}-{block - 1}, which see nearly the whole trained context and are "
        "what the test below sets the positions past the trained length against; and those "
        "positions.",
        markdown_table(header, rows),
    )
    if refusals:  # one of them: they differ only in the length asked for
        page.add(f"Refused, in xfmr-eval's words:\n\n{shown_block(min(refusals))}")
    carry_table(page, carried, tests, block)
    page.figure(_plot(by_length, block), "by_position", f"loss by position in windows of "
                f"{4 * block} tokens, each line a mean over {SMOOTHING} positions: each seed "
                f"faint, the mean over seeds bold; grey band: the late in-window positions "
                f"{late}-{block - 1}; dashed: the trained length {block}; learned positions "
                "cannot run past it and are not drawn")  # fmt: skip


def carry_table(page: Page, carried: dict, tests: Family, block: int) -> None:
    """Each scheme's paired test of its loss past the trained length against late in-window."""
    late = int(block * LATE)
    header = ["pos", "n", f"Δ past - late ({block}+ minus {late}-{block - 1}, simultaneous "
              "interval)", "test", "p (Bonferroni)", f"p equivalent ±{MARGIN} (TOST, "
              "Bonferroni)", "verdict"]  # fmt: skip
    rows = [[pos, len(carried[pos]), *tests.cells(("carry", pos))]
            for pos in SCHEMES if carried[pos]]  # fmt: skip
    page.add(
        f"Does a scheme carry past the trained length? Per seed, the 4x windows' loss at "
        f"positions >= {block} minus its loss at positions {late}-{block - 1}; then the mean "
        "over seeds, its interval at the page's simultaneous level, the paired t-test's and "
        "TOST's p-values (Bonferroni, Scope) and the verdict. Near zero carries; positive: the "
        "loss rises past the trained length.",
        markdown_table(header, rows),
    )


def _plot(by_length: dict, block: int) -> Any:
    from xfmr.runs.compare.figures import colours

    figure, axes = plot_axes()
    top = 0.0
    for pos in SCHEMES:
        seeds = [rows for _, rows in _ran(by_length, pos, LENGTHS[-1]).values()]
        if not seeds:
            continue
        curves = [[loss for loss, _ in rows] for rows in seeds]
        mean = [sum(c[t] for c in curves) / len(curves) for t in range(len(curves[0]))]
        smooth = _moving_average(mean, SMOOTHING)
        # The colour each scheme has in the validation curves (settings in SCHEMES' order).
        colour = colours(len(SCHEMES))[SCHEMES.index(pos)]
        axes.plot(range(len(smooth)), smooth, label=pos, linewidth=1.6, color=colour)
        for curve in curves:
            axes.plot(range(len(curve)), _moving_average(curve, SMOOTHING), color=colour,
                      linewidth=0.6, alpha=0.35)  # fmt: skip
        top = max(top, *smooth)
    axes.axvspan(int(block * LATE) - 0.5, block - 0.5, color="grey", alpha=0.2, linewidth=0)
    axes.axvline(block - 0.5, color="black", linestyle="--", linewidth=1)
    axes.set(xlabel="position", ylabel="validation loss (nats)", ylim=(None, top + 0.5))
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def _moving_average(values: list[float], width: int) -> list[float]:
    """The mean of each value and the width - 1 before it (fewer at the start)."""
    return [sum(values[max(0, t - width + 1) : t + 1]) / (t + 1 - max(0, t - width + 1))
            for t in range(len(values))]  # fmt: skip


def conclusions(finals: dict, carried: dict, tests: Family, block: int) -> str:
    """What the tables say, written from them (so a rerun that finds otherwise says so)."""
    ranked = sorted((_mean(list(v.values())), pos) for pos, v in finals.items() if v)
    late = int(block * LATE)

    def said(kind: str) -> str:
        return "; ".join(f"{pos} {tests.cells((kind, pos))[0]}, {tests.verdicts[(kind, pos)]}"
                         for pos in SCHEMES if (kind, pos) in tests.verdicts)  # fmt: skip

    def where(kind: str, words: str, sign: int = 0) -> list[str]:
        return [pos for pos in SCHEMES if (kind, pos) in tests.verdicts
                and tests.says((kind, pos), words)
                and sign * tests.differences[(kind, pos)].delta >= 0]  # fmt: skip

    rises, falls = where("carry", "different", 1), where("carry", "different", -1)
    held = where("carry", "equivalent") + where("carry", "different, but")
    open_ = where("carry", "inconclusive")
    return "\n\n".join([
        "## What it shows",
        "Final validation loss, from best to worst: "
        + ", ".join(f"{pos} {v:.3f}" for v, pos in ranked) + ". Against learned positions "
        f"(paired over seeds, interval at {tests.level:.5f}): {said('loss')}.",
        f"Past the trained length (4x windows, per seed the loss at positions >= {block} "
        f"minus at {late}-{block - 1}): {said('carry')}. "
        + _listed(held, f"Carries (the loss past the trained length shown within ±{MARGIN} "
                        "nats of the late in-window loss)")
        + _listed(rises, "Worse past the trained length (the loss there higher, beyond chance "
                         "over the page's tests)")
        + _listed(falls, "Better past the trained length than at the late trained positions, "
                         "beyond chance")
        + _listed(open_, "Inconclusive (these seeds neither show a difference nor rule out one "
                         f"as large as ±{MARGIN})")
        + "Learned positions have no row past their table: xfmr-eval refuses them rather than "
        "index past it.",
    ])  # fmt: skip


def _listed(schemes: list[str], words: str) -> str:
    return f"{words}: {', '.join(schemes)}. " if schemes else ""


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _cell(values: list[float], *, signed: bool | None = None) -> str:
    """'mean ± half-width' of the 95% t interval over seeds (signed None), or with signed
    False 'mean [low, high]'; '-' without values."""
    if not values:
        return "-"
    mean, interval = _mean(values), mean_interval(values)
    if signed is None:
        return f"{mean:.3f} ± {(interval[1] - interval[0]) / 2:.3f}" if interval else f"{mean:.3f}"
    return f"{mean:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else f"{mean:.3f}"


if __name__ == "__main__":
    main()
