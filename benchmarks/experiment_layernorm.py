"""Pre-LN against post-LN on tiny Shakespeare: does post-LN need warm-up where pre-LN does not?

    python benchmarks/experiment_layernorm.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (4 layers, d 128, block 64, char tokens) with the
layer norm before each sublayer (`model.placement=pre`) and after each residual sum (`post`),
at peak learning rates 1e-3, 3e-3 and 1e-2, with no warm-up and with a linear warm-up over the
first 10% or 30% of the run, --seeds seeds each. Compares the final validation loss (95% t intervals;
differences with Welch's intervals), counts the runs that diverged (stopped for a loss that was
not finite, or ended above the unigram loss of the validation split) and draws the loss
against the learning rate. Writes docs/experiments/layernorm.md.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.pages import (
    Page,
    arguments,
    column,
    interval,
    markdown_table,
    plot_axes,
    trained,
    welch_difference,
)

PLACEMENTS = ("pre", "post")
LRS = (1e-3, 3e-3, 1e-2)
# schedule.warmup_ratio: none (the first step takes the full lr), 10% and 30% of the run
WARMUPS = (0.0, 0.1, 0.3)
KEYS = ("model.placement", "optim.lr", "schedule.warmup_ratio")  # a setting, as compared


def main() -> None:
    args = arguments("layernorm", __doc__, steps=600, seeds=2)
    print(f"layernorm: {len(PLACEMENTS)} placements x {len(LRS)} lrs x {len(WARMUPS)} warm-ups"
          f" x {args.seeds} seeds x {args.steps} steps")  # fmt: skip
    runs = {
        (placement, lr, warmup, seed): trained(
            args.runs / f"{placement}-lr{lr:g}-warmup{warmup:g}-seed{seed}",
            [
                "experiment=nanogpt_shakespeare_char",
                f"data.path={args.data}",
                f"model.placement={placement}",
                f"optim.lr={lr:g}",
                f"schedule.warmup_ratio={warmup:g}",
                f"seed={seed}",
                f"trainer.max_steps={args.steps}",
                f"trainer.val_check_interval={max(args.steps // 10, 1)}",
                "data.val_batches=50",
            ],
            quick=args.quick,
        )  # fmt: skip
        for placement in PLACEMENTS
        for lr in LRS
        for warmup in WARMUPS
        for seed in range(1, args.seeds + 1)
    }
    val_fraction = next(iter(runs.values())).config.data.val_fraction
    unigram = unigram_loss(args.data, val_fraction)
    outcomes = {key: outcome(run, unigram) for key, run in runs.items()}
    page = Page(args, "layernorm", "Layer norm placement and warm-up", QUESTION)
    losses(page, list(runs.values()), outcomes, unigram, val_fraction)
    differences(page, outcomes)
    page.figure(_plot(outcomes, unigram), "loss_by_lr", "final validation loss against the "
                "peak learning rate: mean over seeds, each seed a dot, a run stopped for a "
                "loss that was not finite an x at the top; the dotted line is the unigram "
                "loss")  # fmt: skip
    page.add(conclusions(outcomes))
    page.write(list(runs.values()))


QUESTION = """\
Does a transformer with its layer norms after each residual sum (post-LN, x = LN(x + f(x)),
Vaswani et al. 2017) need a learning-rate warm-up where one with them before each sublayer
(pre-LN, x = x + f(LN(x)) and a final norm, GPT-2) does not? Xiong et al. 2020 ("On Layer
Normalization in the Transformer Architecture") argue so from the gradients at initialization.
Each placement is set in `experiment=nanogpt_shakespeare_char`, nothing else changed, and
trained at peak learning rates 1e-3 (the experiment's own), 3e-3 and 1e-2, with no warm-up
(`schedule.warmup_ratio=0`, which xfmr's checks accept: the first step takes the full rate)
and with a linear warm-up over the first 10% or 30% of the run (`schedule.warmup_ratio=0.1`,
`0.3`), then
the experiment's cosine decay to a tenth of the peak. Gradients are clipped at norm 1, as in
the experiment."""


def unigram_loss(data: Path, val_fraction: float) -> float:
    """The entropy (nats) of the character frequencies of the validation split, the text's
    last `val_fraction` as xfmr cuts it: the loss of a model that learned only how often each
    letter occurs, and knew the split's own frequencies."""
    text = data.read_text(encoding="utf-8")
    val = text[int(len(text) * (1.0 - val_fraction)) :]
    counts = Counter(val)
    return -sum(n / len(val) * math.log(n / len(val)) for n in counts.values())


@dataclass(frozen=True)
class Outcome:
    """One run as this page reads it.

    Attributes:
        loss: the final validation loss; None when the run stopped for a loss that was not
            finite (it has none) or the loss is itself not finite.
        failed: stopped by xfmr for a loss that was not finite.
        diverged: failed, or ended above the unigram loss (learned no more than letter
            frequencies).
        rise: the largest rise of the validation loss above the lowest earlier one; None with
            fewer than two validations.
    """

    loss: float | None
    failed: bool
    diverged: bool
    rise: float | None


def outcome(run: Any, unigram: float) -> Outcome:
    """What `run` (an `xfmr.Run`) says about stability, against the split's unigram loss."""
    failed = run.status == "failed"
    final = run.metrics.get("val/loss")
    finite = isinstance(final, float) and math.isfinite(final)
    loss = final if finite and not failed else None
    history = [entry.get("val/loss") for entry in run.results.get("history") or []]
    return Outcome(loss, failed, loss is None or loss > unigram, worst_rise(history))


def worst_rise(values: list[float | None]) -> float | None:
    """max over validations of (loss - the lowest loss before it), at least 0."""
    finite = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    if len(finite) < 2:
        return None
    return max(0.0, *(finite[i] - min(finite[:i]) for i in range(1, len(finite))))


def losses(
    page: Page, runs: list[Any], outcomes: dict, unigram: float, val_fraction: float
) -> None:
    """The final loss per setting with its interval, and how many of its runs diverged."""
    import xfmr

    frame = xfmr.compare(runs, metric="val/loss", group_by=list(KEYS))
    found = {tuple(record[k] for k in KEYS): record for record in frame.to_dict("records")}
    mean, low, high = (column(frame, "final", end) for end in ("mean", "low", "high"))
    seeds = len({key[3] for key in outcomes})
    rows = []
    for placement, lr, warmup in _settings():
        record = found.get((placement, f"{lr:g}", f"{warmup:g}"), {})
        chosen = _of(outcomes, placement, lr, warmup)
        rises = [o.rise for o in chosen if o.rise is not None]
        rows.append([placement, f"{lr:g}", f"{warmup:g}", record.get("n", 0),
                     interval(record.get(mean), record.get(low), record.get(high)),
                     sum(o.diverged for o in chosen), sum(o.failed for o in chosen),
                     max(rises) if rises else None])  # fmt: skip
    header = ["placement", "lr", "warm-up", "completed", "final val/loss (95% t interval)",
              f"diverged (of {seeds})", "not finite", "worst rise"]  # fmt: skip
    page.add(
        "## Final validation loss and divergence",
        "Final validation loss of each setting (validated every 10th of the run on 50 batches "
        "of windows spread evenly over the validation split, the same for every run): mean "
        "and 95% t interval over the runs that completed (`xfmr-compare RUNS --group-by "
        f"{','.join(KEYS)}`). A run **diverged** when xfmr stopped it for a loss that was not "
        "finite (it has no final loss; counted under *not finite*) or when it ended above "
        f"the unigram loss of the validation split, {unigram:.3f} nats (the entropy of the "
        f"character frequencies of the text's last {val_fraction:.0%}): it learned no more than "
        "how often each letter occurs. *Worst rise* is the largest climb of a run's validation "
        "loss above its lowest earlier value, the worst over the setting's seeds: 0 for a run "
        "that only improved. Validations every 10th of the run catch a spike only if it lasts "
        "until one.",
        markdown_table(header, rows),
    )


def differences(page: Page, outcomes: dict) -> None:
    """Per learning rate: pre minus post at each warm-up, and what warm-up changed in each."""
    rows = []
    for lr in LRS:
        row: list[Any] = [f"{lr:g}"]
        for warmup in WARMUPS:
            row.append(welch_difference(_losses(outcomes, "pre", lr, warmup),
                                   _losses(outcomes, "post", lr, warmup)))  # fmt: skip
        for placement in PLACEMENTS:
            for warmup in WARMUPS[1:]:
                row.append(welch_difference(_losses(outcomes, placement, lr, WARMUPS[0]),
                                       _losses(outcomes, placement, lr, warmup)))  # fmt: skip
        rows.append(row)
    header = ["lr", *(f"pre - post, warm-up {w:g}" for w in WARMUPS),
              *(f"gain of warm-up {w:g}, {p}" for p in PLACEMENTS for w in WARMUPS[1:])]  # fmt: skip
    page.add(
        "## Differences",
        "Differences of the mean final loss with Welch's 95% interval, over the runs that "
        "completed (a run stopped for a loss that was not finite has no final loss to "
        "difference; a cell without an interval had fewer than two such runs on a side). "
        "*Pre - post*: negative means pre-LN ended lower. *Gain of warm-up W*: the loss "
        "without warm-up minus the loss with warm-up W; positive means warm-up helped.",
        markdown_table(header, rows),
    )


def _settings() -> list[tuple[str, float, float]]:
    return [(p, lr, w) for p in PLACEMENTS for lr in LRS for w in WARMUPS]


def _of(outcomes: dict, placement: str, lr: float, warmup: float) -> list[Outcome]:
    return [o for (p, r, w, _), o in outcomes.items() if (p, r, w) == (placement, lr, warmup)]


def _losses(outcomes: dict, placement: str, lr: float, warmup: float) -> list[float]:
    return [o.loss for o in _of(outcomes, placement, lr, warmup) if o.loss is not None]


def _plot(outcomes: dict, unigram: float) -> Any:
    figure, axes = plot_axes()
    finite = [o.loss for o in outcomes.values() if o.loss is not None]
    top = max([unigram, *finite]) + 0.15
    for index, (placement, warmup) in enumerate((p, w) for p in PLACEMENTS for w in WARMUPS):
        color = f"C{PLACEMENTS.index(placement)}"
        style = ("--", "-", ":")[WARMUPS.index(warmup) % 3]
        shift = 1.05 ** (index - (len(PLACEMENTS) * len(WARMUPS) - 1) / 2)  # side by side
        xs, means = [], []
        for lr in LRS:
            chosen = _of(outcomes, placement, lr, warmup)
            values = [o.loss for o in chosen if o.loss is not None]
            axes.scatter([lr * shift] * len(values), values, color=color, s=12, alpha=0.5)
            stopped = sum(o.failed for o in chosen)
            if stopped:
                axes.scatter([lr * shift] * stopped, [top] * stopped, color=color, marker="x")
            if values:
                xs.append(lr * shift)
                means.append(sum(values) / len(values))
        axes.plot(xs, means, color=color, linestyle=style, marker="o",
                  label=f"{placement}-LN, warm-up {warmup:g}")  # fmt: skip
    axes.axhline(unigram, color="black", linestyle=":", linewidth=1, label="unigram loss")
    axes.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)",
             ylim=(None, top + 0.1))  # fmt: skip
    axes.set_xticks(LRS, [f"{lr:g}" for lr in LRS])
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def conclusions(outcomes: dict) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    lines = ["## What it shows",
             "Runs that diverged: " + "; ".join(_divergence(outcomes, p, w)
                                                for p in PLACEMENTS for w in WARMUPS) + ".",
             "Lowest mean final loss: " + ("; ".join(filter(None, (_best(outcomes, p)
                                           for p in PLACEMENTS))) or "none completed") + ".",
             verdict(outcomes)]  # fmt: skip
    return "\n\n".join(lines)


def _divergence(outcomes: dict, placement: str, warmup: float) -> str:
    """How many of a placement's runs at `warmup` diverged, and at which learning rates."""
    counts = {lr: sum(o.diverged for o in _of(outcomes, placement, lr, warmup)) for lr in LRS}
    runs = sum(len(_of(outcomes, placement, lr, warmup)) for lr in LRS)
    where = ", ".join(f"lr {lr:g}: {n}" for lr, n in counts.items() if n)
    shown = f"{placement}-LN at warm-up {warmup:g}, {sum(counts.values())} of {runs}"
    return f"{shown} ({where})" if where else shown


def _best(outcomes: dict, placement: str) -> str | None:
    """The placement's setting with the lowest mean final loss over its completed runs."""
    means = []
    for lr in LRS:
        for warmup in WARMUPS:
            values = _losses(outcomes, placement, lr, warmup)
            if values:
                means.append((sum(values) / len(values), lr, warmup))
    if not means:
        return None
    loss, lr, warmup = min(means)
    return f"{placement}-LN {loss:.3f} at lr {lr:g}, warm-up {warmup:g}"


def verdict(outcomes: dict) -> str:
    """The answer to the page's question: where warm-up kept each placement's runs from
    diverging, and where it lowered their loss."""
    pairs = [(lr, w) for lr in LRS for w in WARMUPS[1:]]
    rescued = {p: [(lr, w) for lr, w in pairs if _rescued(outcomes, p, lr, w)] for p in PLACEMENTS}
    helped = {p: [(lr, w) for lr, w in pairs if _helped(outcomes, p, lr, w)] for p in PLACEMENTS}
    post_only = sorted({lr for lr, _ in rescued["post"]} - {lr for lr, _ in rescued["pre"]})
    lower_only = sorted({lr for lr, _ in helped["post"]} - {lr for lr, _ in helped["pre"]})
    if post_only:
        answer = (f"So post-LN needed warm-up where pre-LN did not at lr {_listed(post_only)}: "
                  "on these runs, yes.")  # fmt: skip
    elif lower_only:
        answer = ("Post-LN needed warm-up to train at no learning rate where pre-LN did not, "
                  "but warm-up lowered its loss where it did not lower pre-LN's at lr "
                  f"{_listed(lower_only)}: on these runs, post-LN gains more from warm-up "
                  "without needing it.")  # fmt: skip
    else:
        answer = (
            "So post-LN needed warm-up at no learning rate where pre-LN did not: on these runs, no."
        )
    return (f"Warm-up kept runs from diverging (fewer diverged with it than without) for "
            f"{_placements(rescued)}. It lowered the final loss, with a Welch interval above "
            f"zero, for {_placements(helped)}. {answer}")  # fmt: skip


def _rescued(outcomes: dict, placement: str, lr: float, warmup: float) -> bool:
    """Fewer of the runs at `lr` diverged with `warmup` than without warm-up."""
    without, with_ = (sum(o.diverged for o in _of(outcomes, placement, lr, w))
                      for w in (WARMUPS[0], warmup))  # fmt: skip
    return with_ < without


def _helped(outcomes: dict, placement: str, lr: float, warmup: float) -> bool:
    """The final loss without warm-up is above the loss with `warmup`, Welch's interval
    above 0."""
    from xfmr.runs.compare.stats import welch

    gain = welch(_losses(outcomes, placement, lr, WARMUPS[0]),
                 _losses(outcomes, placement, lr, warmup))  # fmt: skip
    return gain is not None and gain.low > 0


def _placements(found: dict[str, list[tuple[float, float]]]) -> str:
    """Each placement's (lr, warm-up) pairs: "pre-LN at lr 0.003 (warm-up 0.1, 0.3); ..."."""

    def pairs(placement: str) -> str:
        lrs = sorted({lr for lr, _ in found[placement]})
        return ", ".join(f"lr {lr:g} (warm-up "
                         + ", ".join(f"{w:g}" for r, w in found[placement] if r == lr) + ")"
                         for lr in lrs)  # fmt: skip

    return "; ".join(f"{p}-LN at " + (pairs(p) if found[p] else "no learning rate")
                     for p in PLACEMENTS)  # fmt: skip


def _listed(lrs: list[float]) -> str:
    return ", ".join(f"{lr:g}" for lr in lrs)


if __name__ == "__main__":
    main()
