"""Loss against training compute for learned, rotary and ALiBi positions on tiny Shakespeare: a
power law per scheme, and whether the schemes' gap grows or shrinks with compute.

    python benchmarks/experiment_scaling.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (block 64, batch 12, char tokens) at three sizes,
d_model 32, 48 and 64 with 1, 2 and 3 layers (heads of 16 dimensions), with each scheme and
--seeds seeds, all for the same --steps. A run's training compute C is the FLOPs per token
xfmr counts for MFU (`xfmr.training.throughput.TrainingFlops`, 6N + 12*L*d*T) times the tokens
it trained (steps x batch x block x accumulation x processes). Fits L = a * C^(-b) per scheme by
least squares in log-log over every run (`xfmr.runs.compare.scaling.power_law`, the
regression's 95% t interval), compares each scheme's exponent with learned positions'
(Welch-Satterthwaite) and the loss at each size (Welch's interval over seeds), and draws the
losses and fits. Writes docs/experiments/scaling.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from common.pages import (
    Page,
    arguments,
    fresh_model,
    interval,
    markdown_table,
    plot_axes,
    trained,
    welch_difference,
)

SCHEMES = ("learned", "rotary", "alibi")
BASELINE = "learned"
HEAD_DIM = 16
# (d_model, n_layers): width and depth grow together, about 10x in compute end to end. Sizes
# and steps are what trains in about 20 minutes on 2 CPU cores; --steps trains longer.
SIZES = ((32, 1), (48, 2), (64, 3))
QUICK_SIZES = ((16, 1), (24, 1), (32, 2))  # heads of 8 dimensions: seconds a run


@dataclass(frozen=True)
class Point:
    """One run as the fit reads it: its size, parameters, compute and final loss (None when it
    has none that is finite)."""

    scheme: str
    size: tuple[int, int]
    seed: int
    heads: int
    parameters: int
    flops_per_token: float
    tokens: int
    loss: float | None

    @property
    def compute(self) -> float:
        return self.flops_per_token * self.tokens


def main() -> None:
    args = arguments("scaling", __doc__, steps=200, seeds=3)
    sizes = QUICK_SIZES if args.quick else SIZES
    block = 16 if args.quick else 64
    print(f"scaling: {len(SCHEMES)} schemes x {len(sizes)} sizes x {args.seeds} seeds x "
          f"{args.steps} steps")  # fmt: skip
    # Seed by seed, size by size, the schemes side by side: a machine busier at one time than
    # another slows every scheme alike.
    runs = {
        (pos, size, seed): trained(
            args.runs / f"{pos}-d{size[0]}-l{size[1]}-seed{seed}",
            overrides(args, pos, size, seed, block),
            quick=args.quick,
        )
        for seed in range(1, args.seeds + 1)
        for size in sizes
        for pos in SCHEMES
    }
    points = [point(run, pos, size, seed) for (pos, size, seed), run in runs.items()]
    fits = {pos: fit([p for p in points if p.scheme == pos]) for pos in SCHEMES}
    page = Page(args, "scaling", "Loss against compute: positional schemes", QUESTION)
    models(page, points, sizes, args.steps, block)
    losses(page, points, sizes)
    laws(page, fits)
    page.figure(_plot(points, fits), "loss_by_compute", "final validation loss against training "
                "compute, log-log: each run a dot, the mean over seeds a ring, the fitted power "
                "law a line")  # fmt: skip
    page.add(conclusions(points, fits, sizes))
    page.write(list(runs.values()))


QUESTION = """\
How does the validation loss of a small character-level GPT fall with the compute spent training
it, and do rotary and ALiBi positions keep, widen or lose their lead over learned positions as
the model grows? Three sizes of `experiment=nanogpt_shakespeare_char`, its width and depth grown
together, train with each scheme for the same number of steps and tokens, at the experiment's
learning rate and schedule, nothing else changed; a power law L = a * C^(-b) in the training
compute C is fitted per scheme (as Kaplan et al. 2020 fit L(C)), and the exponents are
compared: a scheme whose b is larger gains more from each doubling of compute."""


def overrides(args: Any, pos: str, size: tuple[int, int], seed: int, block: int) -> list[str]:
    d_model, n_layers = size
    head_dim = HEAD_DIM // 2 if args.quick else HEAD_DIM
    return ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}", f"pos={pos}",
            f"model.d_model={d_model}", f"model.n_layers={n_layers}",
            f"model.n_heads={d_model // head_dim}", f"seed={seed}",
            f"trainer.max_steps={args.steps}", "data.val_batches=50",
            # The final loss is what is fitted: two validations, the last at the last step.
            f"trainer.val_check_interval={max(args.steps // 2, 1)}",
            f"data.block_size={block}"]  # fmt: skip


def point(run: Any, pos: str, size: tuple[int, int], seed: int) -> Point:
    """What the fit reads of `run`: the FLOPs per token of the model its config builds, counted
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
    return Point(pos, size, seed, int(config.model.n_heads), parameters, flops, tokens,
                 final if finite else None)  # fmt: skip


def fit(points: list[Point]) -> Any:
    """The scheme's power law over its runs with a finite loss; None with too few of them."""
    from xfmr.runs.compare.scaling import MIN_POINTS, power_law

    found = [p for p in points if p.loss is not None]
    if len(found) < MIN_POINTS or len({p.compute for p in found}) < 2:
        return None
    return power_law([p.compute for p in found], [p.loss for p in found])


def _of(points: list[Point], pos: str, size: tuple[int, int]) -> list[Point]:
    return [p for p in points if (p.scheme, p.size) == (pos, size)]


def _losses(points: list[Point], pos: str, size: tuple[int, int]) -> list[float]:
    return [p.loss for p in _of(points, pos, size) if p.loss is not None]


def _one(values: set) -> Any:
    """The value every run of a size shares (they are built alike); a mix is shown as it is."""
    return next(iter(values)) if len(values) == 1 else "/".join(map(str, sorted(values)))


def models(page: Page, points: list[Point], sizes: tuple, steps: int, block: int) -> None:
    """Each size's shape, parameters, FLOPs per token and compute."""
    rows = []
    for size in sizes:
        chosen = [p for p in points if p.size == size]
        params = " / ".join(str(_one({p.parameters for p in _of(points, pos, size)}))
                            for pos in SCHEMES)  # fmt: skip
        rows.append([size[0], size[1], _one({p.heads for p in chosen}), params, _flops(_one({p.flops_per_token for p in chosen})),
                     _one({p.tokens for p in chosen}),
                     _flops(_one({p.compute for p in chosen}))])  # fmt: skip
    header = ["d_model", "layers", "heads", f"parameters ({' / '.join(SCHEMES)})",
              "FLOPs per token", "tokens", "C (FLOPs)"]  # fmt: skip
    page.add(
        "## The models",
        f"Every run trains {steps} steps of batches of windows of {block} characters. Parameters "
        "are every weight of the model (the tied embedding once; learned positions add their "
        f"table of {block} x d_model). *FLOPs per token* is xfmr's count for MFU, "
        "6N + 12 * layers * d_model * block, N the weights that multiply activations (position "
        "tables are looked up, not multiplied, so every scheme costs the same); C is it times "
        "the tokens trained. The sizes and steps are what trains in about 20 minutes on two CPU "
        "cores: every model sees the same tokens, well short of what its size could use, so "
        "the law here is that of small models trained briefly; `--steps` trains longer.",
        markdown_table(header, rows),
    )


def _flops(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def losses(page: Page, points: list[Point], sizes: tuple) -> None:
    """The final loss per size and scheme, and each scheme's difference to learned's."""
    from xfmr.runs.compare.stats import mean_interval

    rows = []
    for size in sizes:
        row: list[Any] = [size[0], size[1], _flops(_one({p.compute for p in points
                                                         if p.size == size}))]  # fmt: skip
        for pos in SCHEMES:
            values = _losses(points, pos, size)
            bounds = mean_interval(values) or (None, None)
            row.append(interval(_mean(values), *bounds) + f" (n={len(values)})")
        for pos in SCHEMES:
            if pos != BASELINE:
                row.append(welch_difference(_losses(points, pos, size),
                                            _losses(points, BASELINE, size)))  # fmt: skip
        rows.append(row)
    header = ["d_model", "layers", "C (FLOPs)", *(f"{pos} loss" for pos in SCHEMES),
              *(f"{pos} - {BASELINE}" for pos in SCHEMES if pos != BASELINE)]  # fmt: skip
    page.add(
        "## Final validation loss by size",
        "The final validation loss (50 batches of windows spread evenly over the validation "
        "split, the same for every run) per size and scheme: mean and 95% t interval over "
        f"seeds; then each scheme minus {BASELINE} positions at that size, with Welch's 95% "
        "interval (negative: the scheme ended lower).",
        markdown_table(header, rows),
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def laws(page: Page, fits: dict[str, Any]) -> None:
    """Each scheme's a and b with intervals, and its b against learned's."""
    from xfmr.runs.compare.scaling import exponent_difference
    from xfmr.runs.compare.stats import holm

    others = [pos for pos in SCHEMES if pos != BASELINE and fits[pos] and fits[BASELINE]]
    found = {pos: exponent_difference(fits[pos], fits[BASELINE]) for pos in others}
    corrected = dict(zip(others, holm([found[pos].p_value for pos in others]), strict=True))
    rows = []
    for pos in SCHEMES:
        law = fits[pos]
        if law is None:
            rows.append([pos, "-", "-", "-", "-", "-", "-", "-"])
            continue
        row = [pos, law.n, f"{law.a:.3g} [{law.a_low:.3g}, {law.a_high:.3g}]",
               f"{law.b:.4f} [{law.b_low:.4f}, {law.b_high:.4f}]", f"{law.r_squared:.3f}"]  # fmt: skip
        if pos in found:
            d = found[pos]
            row += [f"{d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}]", f"{d.p_value:.3g}",
                    f"{corrected[pos]:.3g}"]  # fmt: skip
        else:
            row += ["-", "-", "-"]
        rows.append(row)
    header = ["pos", "runs", "a (95% interval)", "b (95% t interval)", "R²",
              f"b - b({BASELINE}) (95% interval)", "p", "p (Holm)"]  # fmt: skip
    page.add(
        "## Power laws",
        "L = a * C^(-b) fitted per scheme by least squares of log L on log C over every run "
        "(each seed a point; `xfmr.runs.compare.scaling.power_law`). The intervals are the "
        "regression's 95% t intervals (runs - 2 degrees of freedom), a's exponentiated from "
        "the intercept's. The difference of exponents takes the two slopes as independent, "
        "with the Welch-Satterthwaite degrees of freedom (`exponent_difference`): positive, "
        f"the scheme's loss falls faster with compute than {BASELINE} positions' does. Its "
        f"p-value is two-sided, then Holm-corrected over the {len(found)} comparisons with "
        f"{BASELINE}.",
        markdown_table(header, rows),
    )


def _plot(points: list[Point], fits: dict[str, Any]) -> Any:
    from matplotlib.ticker import FormatStrFormatter

    figure, axes = plot_axes()
    computes = sorted({p.compute for p in points})
    for index, pos in enumerate(SCHEMES):
        colour = f"C{index}"
        mine = [p for p in points if p.scheme == pos and p.loss is not None]
        axes.scatter([p.compute for p in mine], [p.loss for p in mine], color=colour, s=10,
                     alpha=0.45)  # fmt: skip
        sizes = sorted({p.size for p in mine}, key=lambda s: _of(mine, pos, s)[0].compute)
        axes.scatter([_of(mine, pos, s)[0].compute for s in sizes],
                     [_mean(_losses(mine, pos, s)) for s in sizes], facecolors="none",
                     edgecolors=colour, s=60)  # fmt: skip
        law = fits[pos]
        if law is not None:
            label = f"{pos}: {law.a:.3g} C^-{law.b:.4f}"
            axes.plot(computes, [law.loss(c) for c in computes], color=colour, label=label)
    axes.set(xscale="log", yscale="log", xlabel="training compute C (FLOPs)",
             ylabel="final validation loss (nats)")  # fmt: skip
    for axis in (axes.yaxis.set_major_formatter, axes.yaxis.set_minor_formatter):
        axis(FormatStrFormatter("%.1f"))  # losses within one decade: no 3 x 10^0
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize="small")
    return figure


def conclusions(points: list[Point], fits: dict[str, Any], sizes: tuple) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    lines = ["## What it shows", _falls(fits)]
    span = (min(p.compute for p in points), max(p.compute for p in points))
    for pos in SCHEMES:
        if pos != BASELINE:
            lines.append(_trend(pos, fits, span) + " " + _ends(points, pos, sizes))
    return "\n\n".join(lines)


def _falls(fits: dict[str, Any]) -> str:
    """Which schemes' loss is shown to fall with compute (b's interval above 0)."""
    shown = [pos for pos in SCHEMES if fits[pos] is not None and fits[pos].b_low > 0]
    told = "; ".join(f"{pos} b = {fits[pos].b:.4f} [{fits[pos].b_low:.4f}, {fits[pos].b_high:.4f}]"
                     for pos in SCHEMES if fits[pos] is not None)  # fmt: skip
    if not told:
        return "Too few runs finished to fit any power law."
    fall = ", ".join(shown) if shown else "no scheme"
    return (
        f"Loss falls as a power of compute, b's interval above zero, for {fall}: {told}. "
        "Each doubling of compute multiplies the loss by 2^(-b)."
    )


def _trend(pos: str, fits: dict[str, Any], span: tuple[float, float]) -> str:
    """Whether `pos`'s gap to the baseline grows or shrinks with compute, from b - b(base):
    log L(pos) - log L(base) changes by -(b - b(base)) per unit of log C, so the power laws
    speak of the ratio of the losses; the fitted ratio is read at the ends of `span`, the
    least and the most compute trained."""
    from xfmr.runs.compare.scaling import exponent_difference

    if fits[pos] is None or fits[BASELINE] is None:
        return f"{pos} against {BASELINE}: no fit to compare."
    found = exponent_difference(fits[pos], fits[BASELINE])
    told = (f"{pos}'s exponent minus {BASELINE}'s is {found.delta:+.4f} "
            f"[{found.low:+.4f}, {found.high:+.4f}] (p = {found.p_value:.3g})")  # fmt: skip
    if found.low <= 0 <= found.high:
        return (f"{told}: the interval holds zero, so whether {pos}'s gap to {BASELINE} grows or "
                "shrinks with compute is not shown by these runs.")  # fmt: skip
    faster = found.delta > 0
    first, last = (fits[pos].loss(c) / fits[BASELINE].loss(c) for c in span)
    gap = {(True, True): f"its lead over {BASELINE} widens",
           (True, False): f"it closes on {BASELINE}",
           (False, True): f"its lead over {BASELINE} narrows",
           (False, False): f"it falls further behind {BASELINE}"}[(faster, last < 1)]  # fmt: skip
    return (f"{told}: {pos}'s loss falls {'faster' if faster else 'more slowly'} with compute "
            f"than {BASELINE}'s. The fitted ratio L({pos}) / L({BASELINE}) goes from "
            f"{first:.3f} at C = {span[0]:.3g} to {last:.3f} at C = {span[1]:.3g} (times "
            f"{2 ** -found.delta:.4f} at each doubling), so, as a ratio of losses, {gap} as "
            "compute grows.")  # fmt: skip


def _ends(points: list[Point], pos: str, sizes: tuple) -> str:
    """The gap to the baseline at the smallest and the largest size, as measured."""
    from xfmr.runs.compare.stats import welch

    told = []
    for size in (sizes[0], sizes[-1]):
        found = welch(_losses(points, pos, size), _losses(points, BASELINE, size))
        if found is None:
            told.append(f"at d_model {size[0]} no interval (fewer than two runs a side)")
            continue
        verdict = ("no difference shown" if found.low <= 0 <= found.high
                   else f"{pos} {'lower' if found.delta < 0 else 'higher'}")  # fmt: skip
        told.append(f"at d_model {size[0]}, {layers(size)} {found.delta:+.3f} "
                    f"[{found.low:+.3f}, {found.high:+.3f}] ({verdict})")  # fmt: skip
    return f"Measured directly, {pos} minus {BASELINE}: " + "; ".join(told) + "."


def layers(size: tuple[int, int]) -> str:
    return f"{size[1]} layer{'s' * (size[1] != 1)}"


if __name__ == "__main__":
    main()
