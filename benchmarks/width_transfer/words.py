"""The width-transfer page's sections: its scope, the sweep, the best learning rates, the
transfer to the widest width, and the closing section, written from the numbers (so a rerun
that finds otherwise says so)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from common.family import Family, paired_at
from common.pages import Page, experiment_overrides, markdown_table, plot_axes
from width_transfer import MARGIN
from width_transfer.sweep import LEVEL, Sweep

NAMES = {"sp": "SP", "mup": "µP"}


def tested(sweep: Sweep) -> Family:
    """At the widest width, per parametrization: the loss at the narrowest width's best lr
    minus the loss at the best found there (nothing to test where the two are one lr); and µP's
    loss at its transferred lr minus SP's at its own. Paired by seed, corrected together."""
    widest, made = sweep.widths[-1], {}
    moved = {par: sweep.best(par, sweep.widths[0]) for par in sweep.parametrizations}
    for par in sweep.parametrizations:
        own = sweep.best(par, widest)
        if own != moved[par]:
            made[par] = paired_at(sweep.values(par, widest, moved[par]),
                                  sweep.values(par, widest, own))  # fmt: skip
    if set(moved) == {"sp", "mup"}:
        made["mup-sp"] = paired_at(sweep.values("mup", widest, moved["mup"]),
                                   sweep.values("sp", widest, moved["sp"]))  # fmt: skip
    return Family(made, MARGIN)


def scope(args: Any, runs: dict, sweep: Sweep, tests: Family) -> str:
    """What was run, on what, for how long, and how the page reads it."""
    finished = [run for run in runs.values() if run is not None]
    run = finished[0]
    data = run.config.data
    text = Path(str(data.path)).read_text(encoding="utf-8")
    train_chars = int(len(text) * (1 - float(data.val_fraction)))
    tokens = int(run.results.get("step") or 0) * int(data.batch_size) * int(data.block_size)
    shown = [o for o in experiment_overrides(run) if o.split("=")[0] not in _VARIED]
    times = [r.results.get("wall_time_s") or math.nan for r in finished]
    return (
        f"{len(finished)} runs: {len(sweep.parametrizations)} parametrizations x "
        f"{len(sweep.widths)} widths (d_model {', '.join(map(str, sweep.widths))}) x "
        f"{len(sweep.exponents)} learning rates (2^{sweep.exponents[0]} to "
        f"2^{sweep.exponents[-1]}, {2.0 ** sweep.exponents[0]:.2e} to "
        f"{2.0 ** sweep.exponents[-1]:.2e}) x seeds {', '.join(map(str, sweep.seeds))}, each "
        f"`xfmr-train {' '.join(shown)}` with its own `model.d_model=`, "
        "`model.parametrization=`, `optim.lr=` and `seed=`, and `data.path=` the --data given. "
        f"{run.results.get('step')} steps of {data.batch_size} windows of {data.block_size} "
        f"characters, {tokens:,} characters seen per run, {tokens / train_chars:.2f} of the "
        f"{train_chars:,} of the training split: early training, the sweep's whole horizon; "
        "the recipe's warm-up (5% of the steps), cosine decay to a tenth and gradient clipping "
        f"at 1.0 are kept. The final validation loss is the mean over {data.val_batches} batches "
        "of windows spread evenly over the validation split, the same for every run, after the "
        "last step. Runs that share a seed share their data order (and, at one width and "
        "parametrization, their initialisation), so seeds are the units of every interval. "
        f"{_budget(args, finished, times)} {_base_check(sweep)}\n\n"
        "**The best learning rate** at a width is the one of lowest mean final loss over the "
        f"seeds. Its interval is a bootstrap over seeds: {_bootstrap_words(sweep)} the best is "
        "found again in every resample, and the interval runs from the lowest to the highest "
        f"log2 lr that the central {LEVEL:.0%} of resamples pick. It answers the question asked "
        "(how sure is the choice of the best?) on the grid itself; an lr outside it is one "
        f"these seeds would not have picked. With {len(sweep.seeds)} seeds it is coarse (with "
        "so few resamples the central 95% is all of them), and it cannot see "
        'noise the seeds share: read an interval of one point as "these seeds agree", not '
        "as a measured precision. The move across widths and the loss given up by "
        "transferring are bootstrapped the same way, both bests found again in each "
        f"resample, so the selection is inside the interval. {_tests_words(tests)}"
    )


_VARIED = ("model.d_model", "model.parametrization", "optim.lr", "seed", "data.path")


def _budget(args: Any, finished: list, times: list[float]) -> str:
    return (
        "The budget, not the question, set the horizon: about 35 minutes of this 2-core "
        f"machine, shared with other work, for all {len(finished)} runs, {args.jobs} at a time "
        "on one thread each. Single-seed SP pilots at 200 steps of 16 windows took 9-13 s a run "
        "at d_model 32 and 47-125 s at 256 (load average near 5); a first start of the study "
        "at that batch took 133-137 s for each of its first two runs at d_model 256, two at a "
        "time, on course for about 80 minutes, so it was stopped, its runs deleted, and the "
        "batch halved to 8 windows, the steps kept. Each run of this page trained for "
        f"{min(times):.0f}-{max(times):.0f} s (results.json); {_span(finished)}"
    )


def _span(finished: list) -> str:
    """The wall time the runs took together: from the first one's start (its results.json's
    time less its training time) to the last results.json written."""
    written = {run.path: (run.path / "results.json").stat().st_mtime for run in finished}
    starts = [written[run.path] - (run.results.get("wall_time_s") or 0.0) for run in finished]
    return (
        f"together they took {(max(written.values()) - min(starts)) / 60:.0f} minutes of wall time "
        "(the first run's start to the last's results.json, by the files' times)."
    )


def _base_check(sweep: Sweep) -> str:
    """µP at its base width is SP: the two rows of the narrowest width should be one."""
    narrowest = sweep.widths[0]
    gaps = [abs(a - b) for e in sweep.exponents
            for a, b in zip(sweep.values("sp", narrowest, e), sweep.values("mup", narrowest, e),
                            strict=True) if math.isfinite(a) and math.isfinite(b)]  # fmt: skip
    if not gaps:
        return ""
    return (
        f"At d_model {narrowest}, µP's base width, µP is SP (every multiplier is 1): the two "
        f"parametrizations' final losses there differ by at most {max(gaps):.1e} over "
        f"{len(gaps)} pairs of runs, a check that the switch changes nothing at the base."
    )


def _bootstrap_words(sweep: Sweep) -> str:
    n = len(sweep.seeds)
    count = sum(1 for _ in sweep.resamples())
    how = "every one of the" if count == n**n else "a random draw of"
    return f"{how} {count} resamples of the {n} seeds with replacement (the same for every lr);"


def _tests_words(tests: Family) -> str:
    if not tests.keys:
        return "No paired test could be made (fewer than two seeds, or nothing to compare)."
    return (
        "The transfer table adds paired t-tests by seed, with the lrs held at those chosen on "
        f"all seeds (so they ignore the selection), each with a TOST within ±{MARGIN} nats: "
        f"{tests.explained()}"
    )


def sections(page: Page, sweep: Sweep, tests: Family) -> None:
    """The sweep's table and figure, the best learning rates, the transfer to the widest."""
    page.add(
        "## The sweep",
        f"Mean final validation loss over seeds {', '.join(map(str, sweep.seeds))}, per "
        "parametrization, width and learning rate; the best of each row in bold. inf: a "
        "setting with a run that diverged or failed.",
        _sweep_table(sweep),
    )
    page.figure(_plot(sweep), "sweep", CAPTION)
    page.add("## Best learning rate per width", BEST_WORDS, _best_table(sweep))
    page.add("## Transfer to the widest width", _transfer_words(sweep),
             _transfer_table(sweep, tests))  # fmt: skip


CAPTION = (
    "mean final validation loss (nats) over seeds against the learning rate (log2), one panel "
    "per parametrization, one line per width (darker: wider); each seed a faint dot, the best "
    "of each width a ring"
)

BEST_WORDS = (
    "Per parametrization and width: the best learning rate (log2 and value), its bootstrap "
    "interval on the grid, the share of resamples that pick it, its mean final loss, and how "
    "far the best sits from the narrowest width's best, in factors of two (negative: a smaller "
    "lr), with its bootstrap interval."
)


def _sweep_table(sweep: Sweep) -> str:
    header = ["parametrization", "d_model", *(f"2^{e}" for e in sweep.exponents)]
    rows = []
    for par in sweep.parametrizations:
        for width in sweep.widths:
            best = sweep.best(par, width)
            means = [sweep.mean(par, width, e) for e in sweep.exponents]
            rows.append([NAMES[par], width, *(f"**{m:.3f}**" if e == best else f"{m:.3f}"
                                              for e, m in zip(sweep.exponents, means, strict=True))])  # fmt: skip
    return markdown_table(header, rows)


def _best_table(sweep: Sweep) -> str:
    header = ["parametrization", "d_model", "best lr (log2)", "best lr", "interval (log2)",
              "share picking it", "mean loss at best", "moved (factors of 2)",
              "moved: interval"]  # fmt: skip
    rows = []
    for par in sweep.parametrizations:
        for width in sweep.widths:
            best = sweep.best(par, width)
            spread, moved = sweep.best_spread(par, width), sweep.shift_spread(par, width)
            low, high = spread.interval()
            shift = best - sweep.best(par, sweep.widths[0])
            rows.append([NAMES[par], width, best, f"{2.0**best:.2e}", f"[{low}, {high}]",
                         f"{spread.share(best):.0%}", f"{sweep.mean(par, width, best):.3f}",
                         f"{shift:+d}", "[{:+d}, {:+d}]".format(*moved.interval())])  # fmt: skip
    return markdown_table(header, rows)


def _transfer_words(sweep: Sweep) -> str:
    narrowest, widest = sweep.widths[0], sweep.widths[-1]
    return (
        f"At d_model {widest}, the loss of the learning rate found best at d_model {narrowest} "
        "(the proxy's choice, carried over) against the loss of the best found at "
        f"{widest} itself: the mean of the per-seed differences, its bootstrap interval (both "
        "bests found again in each resample), and the paired t-test's interval at the page's "
        "simultaneous level with its verdict (lrs held at those chosen on all seeds). "
        "Positive: transferring loses loss. The last row sets µP's transferred lr against "
        "SP's at the widest width, the practitioner's comparison: tune on the proxy, train "
        "wide."
    )


def _transfer_table(sweep: Sweep, tests: Family) -> str:
    narrowest, widest = sweep.widths[0], sweep.widths[-1]
    header = ["comparison", f"lr from d {narrowest} (log2)", f"lr at d {widest} (log2)",
              "Δ loss", "bootstrap interval", "Δ (simultaneous interval)", "test",
              "p (Bonferroni)", f"p equivalent ±{MARGIN} (TOST, Bonferroni)", "verdict"]  # fmt: skip
    rows = []
    for par in sweep.parametrizations:
        moved, own = sweep.best(par, narrowest), sweep.best(par, widest)
        delta = sweep.mean(par, widest, moved) - sweep.mean(par, widest, own)
        low, high = sweep.regret_spread(par).interval()
        rows.append([f"{NAMES[par]}: transferred - best", moved, own, f"{delta:+.3f}",
                     f"[{low:+.3f}, {high:+.3f}]", *tests.cells(par)])  # fmt: skip
    if "mup-sp" in tests.keys:
        moved = {par: sweep.best(par, narrowest) for par in ("sp", "mup")}
        delta = sweep.mean("mup", widest, moved["mup"]) - sweep.mean("sp", widest, moved["sp"])
        rows.append(["µP transferred - SP transferred", f"{moved['mup']} / {moved['sp']}",
                     "-", f"{delta:+.3f}", "-", *tests.cells("mup-sp")])  # fmt: skip
    return markdown_table(header, rows)


def _plot(sweep: Sweep) -> Any:
    import matplotlib

    figure, axes = plot_axes(1, len(sweep.parametrizations), figsize=(10, 4), sharey=True)
    shades = matplotlib.colormaps["viridis"]
    for ax, par in zip(axes[0], sweep.parametrizations, strict=True):
        for i, width in enumerate(sweep.widths):
            colour = shades(1 - (i + 1) / (len(sweep.widths) + 1))
            means = _finite([sweep.mean(par, width, e) for e in sweep.exponents])
            ax.plot(sweep.exponents, means, marker="o", color=colour, label=f"d {width}")
            for e in sweep.exponents:
                ax.scatter([e] * len(sweep.seeds), _finite(sweep.values(par, width, e)), s=6,
                           color=colour, alpha=0.3)  # fmt: skip
            best = sweep.best(par, width)
            ax.scatter([best], [sweep.mean(par, width, best)], s=120, facecolors="none",
                       edgecolors=colour, linewidths=1.5)  # fmt: skip
        ax.set(title=NAMES[par], xlabel="log2 learning rate")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("final validation loss (nats)")
    axes[0][-1].legend(fontsize="small")
    return figure


def _finite(values: list[float]) -> list[float]:
    """A diverged or failed run (inf) left out of a plot (NaN: no point drawn)."""
    return [v if math.isfinite(v) else math.nan for v in values]


def conclusions(sweep: Sweep, tests: Family, steps: int) -> str:
    """What the tables say, written from them."""
    narrowest, widest = sweep.widths[0], sweep.widths[-1]
    moves = []
    for par in sweep.parametrizations:
        bests = [sweep.best(par, w) for w in sweep.widths]
        low, high = sweep.shift_spread(par, widest).interval()
        moves.append(
            f"Under {NAMES[par]} the best log2 lr at d_model "
            f"{', '.join(map(str, sweep.widths))} is {', '.join(map(str, bests))}: from "
            f"{narrowest} to {widest} it moves {_factors(bests[-1] - bests[0])} (bootstrap "
            f"interval {low:+d} to {high:+d}), and at most {max(bests) - min(bests)} across "
            f"the {len(sweep.widths)} widths{_edge(sweep, bests)}."
        )
    regrets = [_regret(sweep, par, tests) for par in sweep.parametrizations]
    return "\n\n".join(["## What it shows", _summary(sweep, tests),
                        " ".join(moves) + " " + _noise(sweep),
                        " ".join(regrets), _versus(sweep, tests), _reading(sweep, steps)])  # fmt: skip


def _summary(sweep: Sweep, tests: Family) -> str:
    """The short answer, and how firm it is."""
    widest = sweep.widths[-1]
    told = []
    for par in sweep.parametrizations:
        shift = sweep.best(par, widest) - sweep.best(par, sweep.widths[0])
        low, high = sweep.shift_spread(par, widest).interval()
        zero = "includes" if low <= 0 <= high else "excludes"
        told.append(f"{NAMES[par]} {shift:+d} (bootstrap {low:+d} to {high:+d}, which {zero} 0)")
    return (
        f"**In short.** The best learning rate's move from the narrowest width to {widest}, in "
        f"factors of two: {'; '.join(told)}. A move whose interval includes 0 is not shown to "
        "be a move; where the two intervals overlap, these seeds do not show the moves to "
        "differ (the page makes no direct test of that). The loss given up by transferring, "
        "below, is the sharper test; read it with the selection inside its bootstrap interval."
    )


def _noise(sweep: Sweep) -> str:
    """How far apart seeds land, against how far apart the learning rates' means are."""
    import statistics

    spreads = [statistics.stdev(v) for par, w, e in sweep.losses
               if len(v := sweep.values(par, w, e)) > 1 and all(map(math.isfinite, v))]  # fmt: skip
    if not spreads:
        return ""
    median = statistics.median(spreads)
    close = [f"{NAMES[par]} d {w} ({n} lrs)" for par in sweep.parametrizations
             for w in sweep.widths if (n := _near_best(sweep, par, w, median)) > 1]  # fmt: skip
    return (
        f"The seeds' standard deviation of one setting's final loss has median {median:.3f} "
        f"nats (range {min(spreads):.3f}-{max(spreads):.3f}). Learning rates whose mean lies "
        f"within {median:.3f} of the best's mean, where there are more than one: "
        f"{'; '.join(close) or 'none; every best stands out by more'}{_flat(close)}"
    )


def _flat(close: list[str]) -> str:
    if not close:
        return "."
    return (
        ". There the best is picked by less than one seed's noise, so a move of one factor "
        "of two between such rows may be noise."
    )


def _near_best(sweep: Sweep, par: str, width: int, spread: float) -> int:
    best = sweep.mean(par, width, sweep.best(par, width))
    return sum(1 for e in sweep.exponents if sweep.mean(par, width, e) - best <= spread)


def _factors(steps: int) -> str:
    if steps == 0:
        return "not at all"
    word = "factor" if abs(steps) == 1 else "factors"
    return f"{abs(steps)} {word} of two {'down' if steps < 0 else 'up'} ({steps:+d})"


def _edge(sweep: Sweep, bests: list[int]) -> str:
    """A warning where a best sits at the end of the grid: it may lie beyond."""
    ends = sorted({b for b in bests if b in (sweep.exponents[0], sweep.exponents[-1])})
    if not ends:
        return ""
    return (f"; a best at the grid's end (2^{', 2^'.join(map(str, ends))}) may lie beyond it, "
            "so the move there is a bound")  # fmt: skip


def _regret(sweep: Sweep, par: str, tests: Family) -> str:
    narrowest, widest = sweep.widths[0], sweep.widths[-1]
    moved, own = sweep.best(par, narrowest), sweep.best(par, widest)
    if moved == own:
        return (f"Under {NAMES[par]} the lr found best at d_model {narrowest} (2^{moved}) is also "
                f"the best at {widest}: transferring it gives up nothing on these seeds.")  # fmt: skip
    delta = sweep.mean(par, widest, moved) - sweep.mean(par, widest, own)
    low, high = sweep.regret_spread(par).interval()
    verdict = tests.verdicts.get(par, "untested (too few seeds)")
    return (
        f"Under {NAMES[par]}, using d_model {narrowest}'s best (2^{moved}) at {widest}, where "
        f"2^{own} is best, costs {delta:+.3f} nats of final loss (bootstrap interval "
        f"{low:+.3f} to {high:+.3f}; paired test: {verdict})."
    )


def _versus(sweep: Sweep, tests: Family) -> str:
    if "mup-sp" not in tests.keys:
        return ""
    widest = sweep.widths[-1]
    best = {par: min(sweep.mean(par, widest, e) for e in sweep.exponents) for par in NAMES}
    d = tests.differences["mup-sp"]
    narrowest = sweep.widths[0]
    gain = {par: min(sweep.mean(par, narrowest, e) for e in sweep.exponents) - best[par]
            for par in NAMES}  # fmt: skip
    return (
        f"At d_model {widest}, µP trained at its proxy's lr against SP at its proxy's lr: "
        f"{d.delta:+.3f} nats [{d.low:+.3f}, {d.high:+.3f}], {tests.verdicts['mup-sp']}. The "
        f"best of either sweep there: SP {best['sp']:.3f}, µP {best['mup']:.3f} (each tuned "
        "at that width, which transfer is meant to spare). Widening from "
        f"{narrowest} to {widest} lowers the best loss by {gain['sp']:.3f} nats under SP and "
        f"by {gain['mup']:.3f} under µP{_slower(gain)}."
    )


def _slower(gain: dict[str, float]) -> str:
    if gain["mup"] >= gain["sp"]:
        return ""
    return (
        ": on these means µP's wider models gained less from their width at this horizon than "
        "SP's (a difference of best means, each best chosen on these seeds, with no test of its "
        "own; a smaller step on the hidden matrices, lr / m, is one possible cause, not tested "
        "here)"
    )


def _reading(sweep: Sweep, steps: int) -> str:
    span = sweep.widths[-1] // sweep.widths[0]
    return (
        f"All of this is {steps} steps of early training of a 2-layer model at widths "
        f"{sweep.widths[0]} to {sweep.widths[-1]} ({span}x), {len(sweep.seeds)} seeds a setting, on a grid of factors of two: a "
        "best lr is known to within "
        "a factor of two at best, and a move smaller than one grid step cannot be seen. µP's "
        "claim is about the limit of width and of training; at this horizon and range the page "
        "tests only whether the transfer already shows, and says nothing of longer runs, deeper "
        "models or other optimizers than AdamW."
    )
