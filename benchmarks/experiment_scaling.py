"""Loss against training compute for learned, rotary and ALiBi positions on tiny Shakespeare, at
five sizes and two token budgets: a law L = E + A * C^(-b) per scheme and budget, fitted to the
means over seeds and tested for lack of fit; whether one law in C holds across both budgets;
and whether the schemes' gap to learned positions grows or shrinks with compute.

    python benchmarks/experiment_scaling.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (block 64, batch 12, char tokens) at d_model 16,
32, 48, 64 and 96 with 1, 1, 2, 3 and 4 layers (heads of 16 dimensions), each for --steps and
for 4x --steps steps (the schedule's warm-up and decay follow the steps), with each scheme and
--seeds seeds. A run's training compute C is the FLOPs per token xfmr counts for MFU
(`xfmr.training.throughput.TrainingFlops`, 6N + 12*L*d*T) times the tokens it trained. Fits
per scheme and budget, and per scheme over both budgets, by
`xfmr.runs.compare.replicates.power_law_on_means` (an exponent is given only where the
lack-of-fit test does not reject the law); compares each scheme with learned positions at
every size and budget (paired by seed) and in exponent, every test corrected together
(common/family.py). Writes docs/experiments/scaling.md.
"""

from __future__ import annotations

import math
from typing import Any

from common.family import Family, paired_at
from common.pages import (
    Page,
    arguments,
    fresh_model,
    interval,
    markdown_table,
    plot_axes,
    trained,
    unigram_loss,
)
from scaling import (
    BASELINE,
    BUDGETS,
    COLOURS,
    HEAD_DIM,
    MARGIN,
    QUICK_BUDGETS,
    QUICK_SIZES,
    SCHEMES,
    SIZES,
    TESTS,
    Point,
)
from scaling.words import conclusions


def main() -> None:
    args = arguments("scaling", __doc__, steps=200, seeds=3)
    sizes = QUICK_SIZES if args.quick else SIZES
    block = 16 if args.quick else 64
    budgets = [round(args.steps * f) for f in (QUICK_BUDGETS if args.quick else BUDGETS)]
    print(f"scaling: {len(SCHEMES)} schemes x {len(sizes)} sizes x {len(budgets)} budgets x "
          f"{args.seeds} seeds")  # fmt: skip
    # Seed by seed, setting by setting, the schemes side by side: a machine busier at one time
    # than another slows every scheme alike.
    runs = {
        (pos, size, steps, seed): trained(
            args.runs / f"{pos}-d{size[0]}-l{size[1]}-s{steps}-seed{seed}",
            overrides(args, pos, size, steps, seed, block),
            quick=args.quick,
        )
        for seed in range(1, args.seeds + 1)
        for steps in budgets
        for size in sizes
        for pos in SCHEMES
    }
    points = [point(run, *key) for key, run in runs.items()]
    fits = {(pos, steps): fit(points, pos, (steps,)) for pos in SCHEMES for steps in budgets}
    fits |= {(pos, None): fit(points, pos, tuple(budgets)) for pos in SCHEMES}
    tests = tested(points, fits, sizes, budgets)
    first = next(iter(runs.values()))
    unigram = unigram_loss(args.data, float(first.config.data.val_fraction))
    page = Page(args, "scaling", "Loss against compute: positional schemes", QUESTION, tests=TESTS)
    page.add("## Scope", scope(points, block, unigram, tests))
    models(page, points, sizes, budgets)
    losses(page, points, sizes, budgets, tests)
    laws(page, fits, budgets, tests)
    page.figure(_plot(points, fits, budgets, unigram), "loss_by_compute", CAPTION)
    page.add(conclusions(points, fits, budgets, tests))
    page.write(list(runs.values()), steps=" or ".join(map(str, budgets)))


QUESTION = """\
How does the validation loss of a small character-level GPT fall with the compute spent training
it, when compute grows with the model's size and with the tokens it sees, and do rotary and
ALiBi positions keep, widen or lose their lead over learned positions as compute grows? Five
sizes of `experiment=nanogpt_shakespeare_char`, width and depth grown together, each trained
for two budgets of steps, with each scheme, at the experiment's learning rate and schedule.
Per scheme and budget a law L = E + A * C^(-b) in the training compute C (E the loss no
compute removes; Kaplan et al. 2020, Hoffmann et al. 2022) is fitted to the means over seeds,
and its lack of fit tested against the seeds' spread; a scheme whose b is larger gains more
from each doubling of compute."""

CAPTION = (
    "final validation loss (nats) against training compute (FLOPs), log-log: colour by scheme "
    "(the same in every table's order), circles the shorter budget and squares the longer; "
    "each run a small faint marker, each setting's mean over seeds a large one; lines the law "
    "fitted to each scheme's means at each budget (solid shorter, dashed longer) where the fit "
    "converged; the dotted line the unigram loss of the validation split"
)


def overrides(args: Any, pos: str, size: tuple[int, int], steps: int, seed: int,
              block: int) -> list[str]:  # fmt: skip
    d_model, n_layers = size
    head_dim = HEAD_DIM // 2 if args.quick else HEAD_DIM
    return ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}", f"pos={pos}",
            f"model.d_model={d_model}", f"model.n_layers={n_layers}",
            f"model.n_heads={d_model // head_dim}", f"seed={seed}",
            f"trainer.max_steps={steps}", "data.val_batches=50",
            # The final loss is what is fitted: two validations, the last at the last step.
            f"trainer.val_check_interval={max(steps // 2, 1)}",
            f"data.block_size={block}"]  # fmt: skip


def point(run: Any, pos: str, size: tuple[int, int], steps: int, seed: int) -> Point:
    """What the fits read of `run`: the FLOPs per token of the model its config builds, counted
    as its MFU is, and the tokens of the steps it took."""
    from xfmr.training.throughput import TrainingFlops

    config = run.config
    model = fresh_model(run)
    flops = TrainingFlops.of(model).per_token(int(config.data.block_size))
    results = run.results
    tokens = (int(results["step"]) * int(config.data.batch_size) * int(config.data.block_size)
              * int(config.trainer.accumulate_grad_batches) * int(results["world_size"]))  # fmt: skip
    final = run.metrics.get("val/loss")
    finite = run.status == "completed" and isinstance(final, float) and math.isfinite(final)
    parameters = sum(p.numel() for p in model.parameters())
    return Point(pos, size, steps, seed, int(config.model.n_heads), parameters, flops, tokens,
                 final if finite else None)  # fmt: skip


def fit(points: list[Point], pos: str, budgets: tuple[int, ...]) -> Any:
    """The scheme's law over its settings at `budgets`, on the means over seeds, with an
    irreducible term where four settings or more leave it a degree of freedom; or the reason
    it could not be fitted, as a string."""
    from xfmr.runs.compare.replicates import power_law_on_means

    found = [p for p in points if p.scheme == pos and p.steps in budgets and p.loss is not None]
    settings = len({p.compute for p in found})
    try:
        return power_law_on_means([p.compute for p in found], [p.loss for p in found],
                                  irreducible=settings >= 4)  # fmt: skip
    except ValueError as e:
        return f"no fit: {e}"


def _of(points: list[Point], pos: str, size: tuple[int, int], steps: int) -> list[Point]:
    return [p for p in points if (p.scheme, p.size, p.steps) == (pos, size, steps)]


def _by_seed(points: list[Point], pos: str, size: tuple[int, int], steps: int) -> dict:
    return {p.seed: p.loss for p in _of(points, pos, size, steps) if p.loss is not None}


def _one(values: set) -> Any:
    """The value every run of a setting shares (they are built alike); a mix shown as it is."""
    return next(iter(values)) if len(values) == 1 else "/".join(map(str, sorted(values)))


def _compute(points: list[Point], size: tuple[int, int], steps: int) -> str:
    return f"{_one({p.compute for p in points if (p.size, p.steps) == (size, steps)}):.3g}"


def tested(points: list[Point], fits: dict, sizes: tuple, budgets: list[int]) -> Family:
    """Every difference the page reports: each scheme minus learned at each size and budget,
    paired by seed; each scheme's exponent minus learned's at each budget where both laws
    fit. One family, corrected together."""
    from xfmr.runs.compare.replicates import means_exponent_difference

    made, margins = {}, {}
    for pos in SCHEMES[1:]:
        for steps in budgets:
            for size in sizes:
                mine, base = (_by_seed(points, p, size, steps) for p in (pos, BASELINE))
                seeds = sorted(set(mine) & set(base))
                made[(pos, size, steps)] = paired_at([mine[s] for s in seeds],
                                                     [base[s] for s in seeds])  # fmt: skip
            laws = fits[(pos, steps)], fits[(BASELINE, steps)]
            if all(not isinstance(law, str) for law in laws):
                made[(pos, steps)] = _exponents(means_exponent_difference, *laws)
                margins[(pos, steps)] = MARGIN / math.log(
                    max(laws[0].compute) / min(laws[0].compute)
                )
    return Family(made, MARGIN, margins)


def _exponents(difference: Any, law: Any, base: Any) -> Any:
    """b(law) - b(base) at a confidence; None where either law fails its lack-of-fit test."""
    from xfmr.runs.compare.replicates import Refused

    def made(confidence: float) -> Any:
        found = difference(law, base, confidence=confidence)
        return None if isinstance(found, Refused) else found

    return made


def scope(points: list[Point], block: int, unigram: float, tests: Family) -> str:
    seeds = sorted({p.seed for p in points})
    steps = sorted({p.steps for p in points})
    batch = points[0].tokens // (points[0].steps * block)
    return (
        f"{len(points)} runs: {len(SCHEMES)} schemes x {len({p.size for p in points})} sizes x "
        f"{len(steps)} budgets ({' and '.join(map(str, steps))} steps of {batch} windows of {block} "
        f"characters) x seeds {', '.join(map(str, seeds))}, on the first 90% of tiny "
        "Shakespeare, one run at a time; the experiment's recipe throughout (AdamW at lr 1e-3, "
        "warm-up over 5% of the steps, cosine decay to a tenth, clipping at 1). A scheme and "
        "learned positions that share a seed share their data order, so their differences are "
        "paired by seed. Every run is early training of small models, far from the "
        "compute-optimal split Kaplan et al. and Hoffmann et al. study: the laws here describe "
        f"this range and recipe, not beyond it. The unigram loss (the entropy of the validation "
        f"split's character frequencies) is {unigram:.3f} nats. The page tests "
        f"{len(tests.keys)} differences: " + tests.explained() + " Intervals on one setting's "
        "mean are 95% t intervals over its seeds, each on its own. Machine and load: the last "
        "section."
    )


def models(page: Page, points: list[Point], sizes: tuple, budgets: list[int]) -> None:
    """Each size's shape, parameters, FLOPs per token and compute at each budget."""
    rows = []
    for size in sizes:
        chosen = [p for p in points if p.size == size]
        params = " / ".join(str(_one({p.parameters for p in chosen if p.scheme == pos}))
                            for pos in SCHEMES)  # fmt: skip
        rows.append([size[0], size[1], _one({p.heads for p in chosen}), params,
                     f"{_one({p.flops_per_token for p in chosen}):.3g}",
                     *(_compute(points, size, steps) for steps in budgets)])  # fmt: skip
    header = ["d_model", "layers", "heads", f"parameters ({' / '.join(SCHEMES)})",
              "FLOPs per token", *(f"C at {steps} steps (FLOPs)" for steps in budgets)]  # fmt: skip
    tokens = [_one({p.tokens for p in points if p.steps == steps}) for steps in budgets]
    page.add(
        "## The models",
        "Parameters are every weight of the model (the tied embedding once; learned positions "
        "add their table of block x d_model). *FLOPs per token* is xfmr's count for MFU, "
        "6N + 12 * layers * d_model * block, N the weights that multiply activations (position "
        "tables are looked up, not multiplied, so every scheme costs the same); C is it times "
        f"the tokens trained: {' and '.join(f'{t:,}' for t in tokens)} tokens at "
        f"{' and '.join(map(str, budgets))} steps.",
        markdown_table(header, rows),
    )


def losses(page: Page, points: list[Point], sizes: tuple, budgets: list[int],
           tests: Family) -> None:  # fmt: skip
    """The final loss per setting, then each scheme's paired difference to learned's."""
    from xfmr.runs.compare.stats import mean_interval

    settings = [(size, steps) for steps in budgets for size in sizes]
    rows = []
    for size, steps in settings:
        row: list[Any] = [size[0], size[1], steps, _compute(points, size, steps)]
        for pos in SCHEMES:
            values = list(_by_seed(points, pos, size, steps).values())
            bounds = mean_interval(values) or (None, None)
            mean = sum(values) / len(values) if values else None
            row.append(interval(mean, *bounds) + f" (n={len(values)})")
        rows.append(row)
    header = ["d_model", "layers", "steps", "C (FLOPs)", *(f"{pos} loss" for pos in SCHEMES)]
    page.add(
        "## Final validation loss",
        "The final validation loss (50 batches of windows spread evenly over the validation "
        "split, the same for every run) per setting: mean and 95% t interval over seeds.",
        markdown_table(header, rows),
    )
    for pos in SCHEMES[1:]:
        rows = [[size[0], size[1], steps, _compute(points, size, steps),
                 *tests.cells((pos, size, steps))] for size, steps in settings]  # fmt: skip
        page.add(
            f"### {pos} minus {BASELINE}",
            f"Per setting, {pos}'s final loss minus {BASELINE} positions', paired by seed, its "
            f"interval at {tests.level:.5f}; p and the TOST's p (within ±{MARGIN} nats) "
            "corrected with the page's other tests. Negative: "
            f"{pos} ended lower.",
            markdown_table(
                [
                    "d_model",
                    "layers",
                    "steps",
                    "C (FLOPs)",
                    f"{pos} - {BASELINE}",
                    "test",
                    "p",
                    "p equivalent",
                    "verdict",
                ],
                rows,
            ),  # fmt: skip
        )


def laws(page: Page, fits: dict, budgets: list[int], tests: Family) -> None:
    """Each law's parameters, or why none is given, and each exponent against learned's."""
    from xfmr.runs.compare.replicates import exponent_interval

    rows = []
    for pos in SCHEMES:
        for steps in [*budgets, None]:
            found = fits[(pos, steps)]
            shown = "both" if steps is None else str(steps)
            if isinstance(found, str):
                rows.append([pos, shown, "-", "-", "-", found, "-"])
                continue
            law, test = found.law, found.lack_of_fit
            b = exponent_interval(found)
            floor = str(law.floor) if law.irreducible else "0 (fixed)"
            if law.note:  # E asked for, reached its bound 0
                floor = "0 (reached its bound)"
            rows.append([pos, shown, len(found.compute), floor, f"{law.scale.value:.3g}",
                         "not given: the law is rejected" if hasattr(b, "reason") else str(b),
                         str(test) if test else "no replicates"])  # fmt: skip
    header = ["pos", "steps", "settings", "E (95% interval)", "A", "b (95% interval)",
              "lack of fit"]  # fmt: skip
    exponent_rows = []
    for pos in SCHEMES[1:]:
        for steps in budgets:
            key = (pos, steps)
            margin = tests.margins.get(key)
            exponent_rows.append([pos, steps, f"{margin:.4f}" if margin else "-",
                                  *tests.cells(key, "+.4f")])  # fmt: skip
    page.add(
        "## Laws",
        "L = E + A * C^(-b) fitted per scheme to the mean over seeds of each setting "
        "(`replicates.power_law_on_means`, residuals in log L, each mean weighted by its runs), "
        "at one budget across the sizes, and across both budgets (*both*: one law in C "
        "whatever its split between size and tokens). The intervals have settings - 3 degrees "
        "of freedom, never runs - 3. *Lack of fit* is the F test of the means' distance from "
        "the law against the seeds' spread about the means; where it rejects the law at 0.05, "
        "no exponent is given, since an exponent of a curve the means do not follow describes "
        "nothing.",
        markdown_table(header, rows),
        f"Each scheme's exponent minus {BASELINE}'s at a budget, where both laws pass their "
        "test (Welch-Satterthwaite df from the two fits; positive: the scheme's loss falls "
        f"faster with compute than {BASELINE}'s). The equivalence margin is the exponent "
        f"difference that moves the ratio of the two reducible losses (L - E) by {MARGIN} nats "
        "across the budget's range of compute.",
        markdown_table(
            [
                "pos",
                "steps",
                "margin",
                f"b - b({BASELINE})",
                "test",
                "p",
                "p equivalent",
                "verdict",
            ],
            exponent_rows,
        ),  # fmt: skip
    )


def _plot(points: list[Point], fits: dict, budgets: list[int], unigram: float) -> Any:
    from matplotlib.ticker import FormatStrFormatter

    figure, axes = plot_axes()
    markers, styles = (
        dict(zip(budgets, "os", strict=True)),
        dict(zip(budgets, ("-", "--"), strict=True)),
    )
    for pos in SCHEMES:
        colour = COLOURS[pos]
        for steps in budgets:
            mine = [
                p for p in points if p.scheme == pos and p.steps == steps and p.loss is not None
            ]
            axes.scatter([p.compute for p in mine], [p.loss for p in mine], color=colour, s=8,
                         alpha=0.35, marker=markers[steps])  # fmt: skip
            settings = sorted({p.compute for p in mine})
            means = [_mean([p.loss for p in mine if p.compute == c]) for c in settings]
            axes.scatter(settings, means, color=colour, s=40, marker=markers[steps],
                         label=f"{pos}, {steps} steps")  # fmt: skip
            found = fits[(pos, steps)]
            if not isinstance(found, str):
                axes.plot(settings, [found.law.loss(c) for c in settings], color=colour,
                          linestyle=styles[steps], linewidth=1)  # fmt: skip
    axes.axhline(unigram, color="black", linestyle=":", linewidth=1, label="unigram loss")
    axes.set(xscale="log", yscale="log", xlabel="training compute C (FLOPs)",
             ylabel="final validation loss (nats)")  # fmt: skip
    for axis in (axes.yaxis.set_major_formatter, axes.yaxis.set_minor_formatter):
        axis(FormatStrFormatter("%.1f"))  # losses within one decade: no 3 x 10^0
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize="x-small", ncol=2)
    return figure


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


if __name__ == "__main__":
    main()
