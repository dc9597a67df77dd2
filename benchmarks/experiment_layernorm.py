"""Pre-LN against post-LN on tiny Shakespeare: does post-LN need warm-up more than pre-LN does?

    python benchmarks/experiment_layernorm.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` with the layer norm before each sublayer (`pre`)
and after each residual sum (`post`) at peak lrs 1e-3 and 3e-3, without warm-up and with one
over the first 30% of the run, --seeds seeds each. Sorts each run into non-finite, collapsed to
the unigram loss, or learned; tests the collapse counts (Fisher), warm-up's gain in final loss
and post-LN's gain minus pre-LN's (paired by seed, TOST against MARGIN), all p-values
Bonferroni-corrected together. Writes docs/experiments/layernorm.md."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from common.family import p_shown
from common.pages import (
    Page,
    arguments,
    experiment_overrides,
    markdown_table,
    plot_axes,
    trained,
    unigram_loss,
)
from xfmr.runs.compare.multiplicity import correct_p_values, simultaneous_confidence
from xfmr.runs.compare.stats import ALPHA, Difference, mean_interval, paired
from xfmr.runs.compare.verdicts import tost, verdict

PLACEMENTS = ("pre", "post")
# The experiment's rate and 3x; warm-up none or 30%: the earlier page's observation (Scope),
# at 8 seeds, so a count one run short of complete (7 of 8 against 0: p 0.0014) passes 16 tests.
LRS = (1e-3, 3e-3)
WARMUPS = (0.0, 0.3)
COLOURS = {"pre": "C0", "post": "C1"}  # one colour per placement wherever the page draws it
STYLES = {0.0: "--", 0.3: "-"}  # one line style per warm-up
# A completed run ending within COLLAPSE nats of the validation split's unigram loss (or above)
# learned little more than character frequencies: collapsed, not diverged (its loss is finite).
COLLAPSE = 0.05
# Fixed before these runs, after the earlier version of this page was read: 0.05 nats is a 5%
# change in perplexity (e^0.05 = 1.05), about the smallest change in final loss that would make
# warm-up worth choosing at this size; a difference shown within it counts as none.
MARGIN = 0.05
NON_FINITE, COLLAPSED, LEARNED = "non-finite", "collapsed to the unigram", "learned"
TESTS = (
    "Fisher's exact test (two-sided) of collapsed-or-non-finite counts without against with "
    "warm-up; paired t-tests by seed of warm-up's gain in final loss and of post-LN's gain "
    "minus pre-LN's, each with a TOST for equivalence within ±0.05 nats; every p-value "
    "Bonferroni-corrected together, intervals at the matching simultaneous level."
)


def main() -> None:
    args = arguments("layernorm", __doc__, steps=600, seeds=8)
    runs = {key: trained(args.runs / "{}-lr{:g}-warmup{:g}-seed{}".format(*key),
                         overrides(args, *key), quick=args.quick)
            for key in product(PLACEMENTS, LRS, WARMUPS, range(1, args.seeds + 1))}  # fmt: skip
    val_fraction = float(next(iter(runs.values())).config.data.val_fraction)
    unigram = unigram_loss(args.data, val_fraction)
    outcomes = {key: outcome(run, unigram) for key, run in runs.items()}
    tests = Tested(outcomes, args.seeds)
    page = Page(args, "layernorm", "Layer norm placement and warm-up", QUESTION, tests=TESTS)
    page.add("## Scope", scope(runs, tests))
    table_of_outcomes(page, outcomes, unigram, val_fraction)
    page.figure(_plot(outcomes, unigram), "loss_by_lr", CAPTION)
    warmup_tables(page, tests)
    page.add(conclusions(tests))
    page.write(list(runs.values()))


def overrides(args: Any, placement: str, lr: float, warmup: float, seed: int) -> list[str]:
    """The experiment with one setting and seed, validated every 10th of the run."""
    return ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}",
            f"model.placement={placement}", f"optim.lr={lr:g}",
            f"schedule.warmup_ratio={warmup:g}", f"seed={seed}",
            f"trainer.max_steps={args.steps}", "data.val_batches=50",
            f"trainer.val_check_interval={max(args.steps // 10, 1)}"]  # fmt: skip


QUESTION = """\
Does a transformer with its layer norms after each residual sum (post-LN, x = LN(x + f(x)),
Vaswani et al. 2017) need a learning-rate warm-up more than one with them before each sublayer
(pre-LN, x = x + f(LN(x)) and a final norm, GPT-2)? Xiong et al. 2020 ("On Layer Normalization
in the Transformer Architecture") argue so from the gradients at initialization. Each placement
is set in `experiment=nanogpt_shakespeare_char`, nothing else changed, and trained at peak
learning rates 1e-3 (the experiment's own) and 3e-3, with no warm-up
(`schedule.warmup_ratio=0`: the first step takes the full rate) and with a linear warm-up over
the first 30% of the run (`schedule.warmup_ratio=0.3`)."""

CAPTION = (
    "final validation loss (nats) against the peak learning rate (log scale). Colour: placement "
    "(pre-LN blue, post-LN orange); line style: warm-up (dashed: none, solid: 30%); each line "
    "joins the means over a setting's learned runs (none where no run learned). Dots: learned "
    "runs; hollow triangles: runs collapsed to the unigram, at their final loss; x at the top: "
    "non-finite runs; a setting's points shifted sideways to keep the four apart. Dotted line: "
    f"the validation split's unigram loss; shaded: within {COLLAPSE} nats of it or above, "
    "where a completed run counts as collapsed"
)


@dataclass(frozen=True)
class Outcome:
    """One run as this page reads it: its kind (NON_FINITE: stopped by xfmr for a loss that
    was not finite; COLLAPSED: completed, final loss within COLLAPSE of the unigram loss or
    above; else LEARNED), its final validation loss where finite, and its `worst_rise`."""

    kind: str
    loss: float | None
    rise: float | None


def outcome(run: Any, unigram: float) -> Outcome:
    """What `run` (an `xfmr.Run`) says about stability, against the split's unigram loss."""
    history = [entry.get("val/loss") for entry in run.results.get("history") or []]
    if run.status == "failed":
        return Outcome(NON_FINITE, None, worst_rise(history))
    final = run.metrics.get("val/loss")
    loss = final if isinstance(final, float) and math.isfinite(final) else None
    kind = LEARNED if loss is not None and loss < unigram - COLLAPSE else COLLAPSED
    return Outcome(kind, loss, worst_rise(history))


def worst_rise(values: list[float | None]) -> float | None:
    """max over validations of (loss - the lowest loss before it), at least 0."""
    finite = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    rises = [finite[i] - min(finite[:i]) for i in range(1, len(finite))]
    return max(0.0, *rises) if rises else None


class Tested:
    """Every test the page reports, Bonferroni-corrected as one family: Fisher's per
    (placement, lr) on `tables`; and the paired differences of `samples` (seed -> pair), per
    ("gain", placement, lr) and ("interaction", lr), each with its interval at the
    simultaneous level, corrected p and TOST p, and verdict."""

    def __init__(self, outcomes: dict, seeds: int) -> None:
        from scipy.stats import fisher_exact

        self.tables = {(p, lr): [bad_and_learned(outcomes, p, lr, w) for w in WARMUPS]
                       for p in PLACEMENTS for lr in LRS}  # fmt: skip
        self.fisher_raw = {k: float(fisher_exact(t).pvalue) for k, t in self.tables.items()}
        self.samples = {**{("gain", p, lr): gains(outcomes, p, lr) for p, lr in self.tables},
                        **{("interaction", lr): interaction(outcomes, lr) for lr in LRS}}  # fmt: skip
        plain = {k: paired(*_sides(s)) for k, s in self.samples.items()}
        self.keys = [k for k, found in plain.items() if found is not None]
        raw = [*self.fisher_raw.values(), *(plain[k].p_value for k in self.keys),
               *(tost(plain[k], MARGIN) for k in self.keys)]  # fmt: skip
        self.count = sum(1 for p in raw if not math.isnan(p))
        self.level = simultaneous_confidence(max(self.count, 1))
        corrected = correct_p_values(raw, method="bonferroni")
        self.fisher = dict(zip(self.fisher_raw, corrected, strict=False))
        self.differences: dict[tuple, Difference] = {}
        self.p, self.p_equivalent, self.verdicts = {}, {}, {}
        offset = len(self.fisher_raw)
        for i, key in enumerate(self.keys):
            found = paired(*_sides(self.samples[key]), confidence=self.level)
            assert found is not None, "a difference that ran at 95% runs at any level"
            self.differences[key] = found
            self.p[key] = corrected[offset + i]
            self.p_equivalent[key] = corrected[offset + len(self.keys) + i]
            self.verdicts[key] = verdict(self.p[key], self.p_equivalent[key], MARGIN)
        # The most lopsided table (every run bad on one side, none on the other): the smallest
        # p Fisher's test can give at this many seeds, before and after the correction.
        self.least_fisher = float(fisher_exact([[seeds, 0], [0, seeds]]).pvalue)
        self.least_corrected = min(1.0, self.least_fisher * max(self.count, 1))

    def cells(self, key: tuple) -> list[str]:
        """pairs, Δ [simultaneous interval], test, p, p equivalent, verdict; with fewer than 2
        learned pairs, a cell that says so."""
        if key not in self.differences:
            return [str(len(self.samples[key])), "fewer than 2 learned pairs", *["-"] * 4]
        return [str(self.differences[key].pairs), _said(self, key, bare=True),
                self.differences[key].test, p_shown(self.p[key]), p_shown(self.p_equivalent[key]),
                self.verdicts[key]]  # fmt: skip

    def collapse_said(self, placement: str, lr: float) -> str:
        """Fisher's result in words: which side had fewer bad runs, if the corrected p < ALPHA."""
        (bad_without, _), (bad_with, _) = self.tables[(placement, lr)]
        if self.fisher[(placement, lr)] >= ALPHA:
            return "not shown (corrected p >= 0.05)"
        return "fewer with warm-up" if bad_with < bad_without else "more with warm-up"


def bad_and_learned(outcomes: dict, placement: str, lr: float, warmup: float) -> list[int]:
    """[collapsed or non-finite, learned] runs of one setting: a row of Fisher's table."""
    kinds = [o.kind for o in _of(outcomes, placement, lr, warmup).values()]
    return [sum(k != LEARNED for k in kinds), sum(k == LEARNED for k in kinds)]


def gains(outcomes: dict, placement: str, lr: float) -> dict[int, tuple[float, float]]:
    """Seed -> (loss without warm-up, loss with it), over seeds where both runs learned."""
    without, with_ = ({s: o.loss for s, o in _of(outcomes, placement, lr, w).items()
                       if o.kind == LEARNED} for w in WARMUPS)  # fmt: skip
    return {s: (without[s], with_[s]) for s in sorted(set(without) & set(with_))}


def interaction(outcomes: dict, lr: float) -> dict[int, tuple[float, float]]:
    """Seed -> (post-LN's gain, pre-LN's gain), over seeds where all four runs learned."""
    pre, post = (gains(outcomes, p, lr) for p in PLACEMENTS)
    shared = sorted(set(pre) & set(post))
    return {s: (post[s][0] - post[s][1], pre[s][0] - pre[s][1]) for s in shared}


def _sides(pairs: dict[int, tuple[float, float]]) -> tuple[list[float], list[float]]:
    """(firsts, seconds) of seed -> pair, in seed order, as `stats.paired` takes them."""
    return [a for a, _ in pairs.values()], [b for _, b in pairs.values()]


def scope(runs: dict, tests: Tested) -> str:
    run = next(iter(runs.values()))
    data, optim, config = run.config.data, run.config.optim.target, run.config
    steps, seeds = int(run.results.get("step") or 0), len({key[3] for key in runs})
    return (
        f"{len(runs)} runs: {len(PLACEMENTS)} placements x {len(LRS)} peak learning rates x "
        f"{len(WARMUPS)} warm-ups x {seeds} seeds, each `xfmr-train "
        f"{' '.join(experiment_overrides(run))}` with its own placement, lr, warm-up and seed: "
        f"{steps} steps of {data.batch_size} windows of {data.block_size} characters ({steps} x "
        f"{data.batch_size} x {data.block_size} = {steps * data.batch_size * data.block_size:,} "
        f"characters seen per run), from the first {1 - float(data.val_fraction):.0%} of "
        f"`{Path(str(data.path)).name}`"
        + (" (tiny Shakespeare)" if "tinyshakespeare" in str(data.path) else "") + ", with the "
        f"experiment's {optim.path.rsplit('.', 1)[-1]} (betas {tuple(optim.settings['betas'])}, "
        f"weight decay {optim.settings['weight_decay']:g}), cosine decay to "
        f"{config.schedule.target.settings['min_lr_ratio']:g} of the peak and gradients clipped "
        f"at norm {config.trainer.gradient_clip_val:g}. This is early training of one recipe at "
        "one small size: it need not hold for longer runs, larger models or other optimisers. "
        "Runs of one placement that share a seed share their initialisation and data order, and "
        "runs of both share the data order, so differences are paired by seed. The grid was "
        "chosen after an earlier version of this page (seeds 1 and 2, rates up to 1e-2, "
        "warm-ups of 10% and 30%) saw post-LN collapse at 3e-3 unless warmed up over 30%: it "
        "retests that with more seeds, two of them the earlier ones.\n\n"
        f"The page reports {tests.count} p-values (Fisher's tests, paired t-tests and TOSTs "
        f"within ±{MARGIN} nats, the margin fixed in the script: a 5% change in perplexity, "
        f"e^{MARGIN} = {math.exp(MARGIN):.3f}), Bonferroni-corrected together; each difference's "
        f"interval is at {tests.level:.5f} (`multiplicity.simultaneous_confidence`), so all hold "
        "together at 95% and an interval excludes 0 exactly when its corrected p is below 0.05. "
        f"With {seeds} seeds a side, the most lopsided collapse table ({seeds} of {seeds} against "
        f"0) gives Fisher's p = {tests.least_fisher:.3g}, {tests.least_corrected:.3g} corrected"
        + (": no collapse count can be significant at this design; the counts describe, they "
           "do not test." if tests.least_corrected >= ALPHA else ".")
    )  # fmt: skip


def table_of_outcomes(page: Page, outcomes: dict, unigram: float, val_fraction: float) -> None:
    """Per setting: how its runs ended, the final loss over the learned ones, the worst rise."""
    seeds = len({key[3] for key in outcomes})
    rows = []
    for placement, lr, warmup in product(PLACEMENTS, LRS, WARMUPS):
        chosen = list(_of(outcomes, placement, lr, warmup).values())
        kinds = Counter(o.kind for o in chosen)
        learned = [o.loss for o in chosen if o.kind == LEARNED]
        rises = [o.rise for o in chosen if o.rise is not None]
        rows.append([placement, f"{lr:g}", f"{warmup:g}", len(chosen) - kinds[NON_FINITE],
                     kinds[NON_FINITE], kinds[COLLAPSED], kinds[LEARNED], _cell(learned),
                     max(rises) if rises else None])  # fmt: skip
    header = ["placement", "lr", "warm-up", "completed", f"non-finite (of {seeds})",
              f"collapsed to the unigram (of {seeds})", f"learned (of {seeds})",
              "final val/loss of learned runs (95% t interval)", "worst rise"]  # fmt: skip
    page.add(
        "## How the runs ended",
        "Each run is one of three kinds, counted apart. **Non-finite**: xfmr stopped it for a "
        "loss that was not a number. **Collapsed to the unigram**: it completed with a final "
        f"validation loss within {COLLAPSE} nats of the unigram loss of the validation split, "
        f"{unigram:.3f} nats (the entropy of the character frequencies of the text's last "
        f"{val_fraction:.0%}), or above it: it learned little more than how often each "
        "character occurs. **Learned**: the rest. Final loss (validated on 50 batches of "
        "windows spread evenly over the validation split, the same for every run): mean over "
        "the learned runs, 95% t interval, each setting on its own. *Worst rise*: the largest "
        "climb of a run's validation loss (every 10th of the run) above its lowest earlier "
        "value, the worst over the setting's runs.",
        markdown_table(header, rows),
    )


def warmup_tables(page: Page, tests: Tested) -> None:
    """Fisher's tests of the collapse counts, warm-up's paired gains, and the interaction."""
    fisher = [[p, f"{lr:g}", *(f"{bad} of {bad + good}" for bad, good in tests.tables[(p, lr)]),
               p_shown(tests.fisher_raw[(p, lr)]), p_shown(tests.fisher[(p, lr)]),
               tests.collapse_said(p, lr)] for p in PLACEMENTS for lr in LRS]  # fmt: skip
    header = ["placement", "lr", "collapsed or non-finite, no warm-up", "with warm-up 0.3",
              "p (Fisher)", "p (Bonferroni)", "collapse"]  # fmt: skip
    gain = [[p, f"{lr:g}", *tests.cells(("gain", p, lr))] for p in PLACEMENTS for lr in LRS]
    both = [[f"{lr:g}", *tests.cells(("interaction", lr))] for lr in LRS]
    page.add(
        "## What warm-up changed",
        "Collapsed or non-finite runs without and with warm-up, per placement and learning "
        "rate, and Fisher's exact test (two-sided) of the two counts, Bonferroni-corrected "
        "with every p-value on the page (Scope).",
        markdown_table(header, fisher),
        "Warm-up's gain, loss(no warm-up) - loss(warm-up 0.3) (positive: warm-up lowered the "
        "final loss), per seed over the seeds where both runs learned: the mean, its interval at "
        "the simultaneous level, the paired t-test's and TOST's p-values (Bonferroni), verdict.",
        markdown_table(["placement", "lr", *paired_header("gain")], gain),
        "The interaction, the page's question: post-LN's gain minus pre-LN's, per seed over the "
        "seeds where all four runs learned (positive: post-LN gained more from warm-up).",
        markdown_table(["lr", *paired_header("post gain - pre gain")], both),
    )


def paired_header(difference: str) -> list[str]:
    return ["learned pairs", f"{difference} (simultaneous interval)", "test", "p (Bonferroni)",
            f"p equivalent ±{MARGIN} (TOST, Bonferroni)", "verdict"]  # fmt: skip


def _plot(outcomes: dict, unigram: float) -> Any:
    figure, axes = plot_axes()
    finite = [o.loss for o in outcomes.values() if o.loss is not None]
    top = max([unigram, *finite]) + 0.15
    axes.axhspan(unigram - COLLAPSE, top + 0.1, color="grey", alpha=0.15, linewidth=0)
    for index, (placement, warmup) in enumerate((p, w) for p in PLACEMENTS for w in WARMUPS):
        colour = COLOURS[placement]
        shift = 1.04 ** (index - (len(PLACEMENTS) * len(WARMUPS) - 1) / 2)  # side by side
        xs, means = [], []
        for lr in LRS:
            chosen = list(_of(outcomes, placement, lr, warmup).values())
            learned = [o.loss for o in chosen if o.kind == LEARNED]
            collapsed = [o.loss for o in chosen if o.kind == COLLAPSED and o.loss is not None]
            stopped = sum(o.kind == NON_FINITE for o in chosen)
            x = lr * shift
            axes.scatter([x] * len(learned), learned, color=colour, s=14, alpha=0.6)
            axes.scatter([x] * len(collapsed), collapsed, marker="^", s=30,
                         facecolors="none", edgecolors=colour)  # fmt: skip
            axes.scatter([x] * stopped, [top] * stopped, color=colour, marker="x")
            if learned:
                xs.append(x)
                means.append(sum(learned) / len(learned))
        axes.plot(xs, means, color=colour, linestyle=STYLES[warmup],
                  label=f"{placement}-LN, warm-up {warmup:g}")  # fmt: skip
    axes.axhline(unigram, color="black", linestyle=":", linewidth=1, label="unigram loss")
    for marker, label, look in (("o", "learned run", {"color": "grey"}),
                                ("^", "collapsed run", {"facecolors": "none", "edgecolors": "grey"}),
                                ("x", "non-finite run (at the top)", {"color": "grey"})):  # fmt: skip
        axes.scatter([], [], marker=marker, label=label, **look)
    axes.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)",
             ylim=(None, top + 0.1))  # fmt: skip
    axes.set_xticks(LRS, [f"{lr:g}" for lr in LRS])
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def conclusions(tests: Tested) -> str:
    """What the tables say, written from them (so a rerun that finds otherwise says so)."""
    return "\n\n".join(["## What it shows", headline(tests),
                        " ".join(_collapse_words(tests, p) for p in PLACEMENTS),
                        " ".join(_gain_words(tests, p) for p in PLACEMENTS)])  # fmt: skip


def headline(tests: Tested) -> str:
    """The answer to the page's question, from the corrected tests only: warm-up cut post-LN's
    collapses where it did not pre-LN's, or post-LN gained more from it (the interaction)."""
    rescued = {p: [lr for lr in LRS if tests.collapse_said(p, lr).startswith("fewer")]
               for p in PLACEMENTS}  # fmt: skip
    post_only = [lr for lr in rescued["post"] if lr not in rescued["pre"]]
    more, less = ([lr for lr in LRS if _says(tests, ("interaction", lr), "different")
                   and sign * tests.differences[("interaction", lr)].delta > 0]
                  for sign in (1, -1))  # fmt: skip
    found = []
    if post_only:
        found.append(f"warm-up cut post-LN's collapses beyond chance at lr {_listed(post_only)}"
                     ", where pre-LN's counts show no such change (two tests, not one test of "
                     "their difference)")  # fmt: skip
    if more:
        found.append(f"post-LN gained more from warm-up than pre-LN at lr {_listed(more)}")
    answer = ("On these runs, yes: " + "; ".join(found) + "." if found else
              "These runs do not show that post-LN needs warm-up more than pre-LN: warm-up cut "
              "no collapse count of post-LN's beyond chance (corrected) where it did not cut "
              "pre-LN's, and no interaction is significant.")  # fmt: skip
    if less:
        answer += f" Pre-LN gained more from warm-up than post-LN at lr {_listed(less)}."
    said = "; ".join(f"lr {lr:g}: {_said(tests, ('interaction', lr))}" for lr in LRS)
    return f"{answer} Post-LN's gain minus pre-LN's (the interaction): {said}."


def _collapse_words(tests: Tested, placement: str) -> str:
    """Where more of the placement's runs collapsed (or went non-finite) without warm-up than
    with it, with the counts and what the corrected test says; and where warm-up added some."""
    tables = {lr: tests.tables[(placement, lr)] for lr in LRS}
    fewer = [lr for lr, (without, with_) in tables.items() if with_[0] < without[0]]
    said = {words: [lr for lr in LRS if tests.collapse_said(placement, lr).startswith(words)]
            for words in ("fewer", "more")}  # fmt: skip
    worse = f" Warm-up added collapses beyond chance at lr {_listed(said['more'])}."
    worse = worse if said["more"] else ""
    if not fewer:
        return (
            f"No more {placement}-LN runs collapsed without warm-up than with it at any lr.{worse}"
        )
    counts = ", ".join(f"lr {lr:g} ({tables[lr][0][0]} of {sum(tables[lr][0])} without, "
                       f"{tables[lr][1][0]} with; corrected p {p_shown(tests.fisher[(placement, lr)])})"
                       for lr in fewer)  # fmt: skip
    tested = f"lr {_listed(said['fewer'])}" if said["fewer"] else "none of them"
    return (f"More {placement}-LN runs collapsed or went non-finite without warm-up than with "
            f"it at {counts}; beyond chance after the correction at {tested}.{worse}")  # fmt: skip


def _gain_words(tests: Tested, placement: str) -> str:
    """Where warm-up lowered, raised or left the placement's final loss, by the verdicts."""
    keys = [("gain", placement, lr) for lr in LRS]
    sign = {k: getattr(tests.differences.get(k), "delta", 0.0) for k in keys}
    groups = {
        "lowered it": [k for k in keys if _says(tests, k, "different") and sign[k] > 0],
        "raised it": [k for k in keys if _says(tests, k, "different") and sign[k] < 0],
        f"equivalent within ±{MARGIN:g}": [k for k in keys if _says(tests, k, "equivalent")],
        "inconclusive": [k for k in keys if _says(tests, k, "inconclusive")],
        "untested (fewer than 2 learned pairs)": [k for k in keys if k not in tests.verdicts],
    }  # fmt: skip
    said = "; ".join(f"{words} at " + ", ".join(f"lr {k[2]:g} ({_said(tests, k, bare=True)})"
                                                for k in found)
                     for words, found in groups.items() if found)  # fmt: skip
    return f"Warm-up's effect on {placement}-LN's final loss (gain): {said}."


def _says(tests: Tested, key: tuple, words: str) -> bool:
    return tests.verdicts.get(key, "").startswith(words)


def _said(tests: Tested, key: tuple, *, bare: bool = False) -> str:
    """'Δ [simultaneous interval], verdict' (bare: without the verdict), or why untested."""
    if key not in tests.differences:
        return f"{len(tests.samples[key])} learned pairs" + ("" if bare else ", untested")
    d = tests.differences[key]
    return f"{d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}]" + (
        "" if bare else f", {tests.verdicts[key]}"
    )


def _of(outcomes: dict, placement: str, lr: float, warmup: float) -> dict[int, Outcome]:
    """Seed -> outcome of one setting's runs."""
    return {s: o for (p, r, w, s), o in outcomes.items() if (p, r, w) == (placement, lr, warmup)}


def _cell(values: list[float]) -> str:
    """'mean [low, high]' of the 95% t interval; the mean alone for one value, '-' for none."""
    if not values:
        return "-"
    mean, found = sum(values) / len(values), mean_interval(values)
    return f"{mean:.3f} [{found[0]:.3f}, {found[1]:.3f}]" if found else f"{mean:.3f}"


def _listed(lrs: list[float]) -> str:
    return ", ".join(f"{lr:g}" for lr in lrs)


if __name__ == "__main__":
    main()
