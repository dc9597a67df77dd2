"""An LSTM against a Transformer decoder of the same size on tiny Shakespeare, each at its own
best learning rate: what does the Transformer buy at equal steps, and at equal training time?

    python benchmarks/experiment_lstm.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (4-layer decoder, d 128, block 64, batch 12, char
tokens) and it with `arch=rnn` (embedding -> 2-layer LSTM -> tied projection) sized by xfmr to the
decoder's parameters. Each one's peak lr is the best of LRS on SELECTION_SEED; at it, seeds
1..--seeds, compared paired by seed at equal steps, at equal training time and in ms per step,
with Bonferroni over the page and a TOST verdict against MARGIN. Writes docs/experiments/lstm.md.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.pages import (
    Page,
    arguments,
    experiment_overrides,
    fresh_model,
    markdown_table,
    plot_axes,
    run_vocab_size,
    shown_block,
    trained,
)
from xfmr.runs.compare.multiplicity import correct_p_values, simultaneous_confidence
from xfmr.runs.compare.stats import ALPHA, mean_interval, paired
from xfmr.runs.compare.verdicts import tost, verdict

ARCHS = ("decoder", "rnn")
NAMES = {"decoder": "Transformer decoder", "rnn": "LSTM"}
COLOURS = {"decoder": "C0", "rnn": "C1"}  # one colour per architecture in every figure
LSTM_LAYERS = 2
# The decoder's own 1e-3, a step of about 3x below it and two above, where LSTMs often train
# best: 2 x 4 selection runs and 2 x 3 compared runs of 1000 steps, about 25 minutes on 2 cores.
LRS = (3e-4, 1e-3, 3e-3, 1e-2)
SELECTION_SEED = 100  # each lr is chosen on this seed, which no comparison uses
# Fixed before the runs, as on the positions page: 0.05 nats is a 5% change in perplexity
# (e^0.05 = 1.05), about the smallest gap between two models worth choosing one for at this
# size; a loss difference shown to lie within it counts as none.
MARGIN = 0.05
TESTS = ("paired t-tests by seed of the LSTM against the decoder (final validation loss, loss at "
         "equal training time, ms per step), each loss difference also with a TOST for "
         f"equivalence within ±{MARGIN} nats; every p-value Bonferroni-corrected together, "
         "intervals at the matching simultaneous level.")  # fmt: skip
MEASURES = {"final": "val/loss at the last step", "at T": "val/loss at T", "ms/step": "ms/step"}
LOSSES = ("final", "at T")  # the measures in nats, tested for equivalence within MARGIN
AXES = {"step": "training step", "time_s": "seconds of training (validation excluded)"}


def main() -> None:
    args = arguments("lstm", __doc__, steps=1000, seeds=3)
    if SELECTION_SEED <= args.seeds:
        raise SystemExit(f"--seeds={args.seeds} would compare the selection seed "
                         f"{SELECTION_SEED}: give fewer than {SELECTION_SEED}")  # fmt: skip
    print(f"lstm: {len(ARCHS)} archs x {len(LRS)} lrs on seed {SELECTION_SEED}, then x "
          f"{args.seeds} seeds: {len(ARCHS) * (len(LRS) + args.seeds)} runs of {args.steps} "
          "steps")  # fmt: skip
    # Architectures alternate, so that a machine busier at one time than another slows both.
    sweep: dict[tuple[str, float], Any] = {}
    for lr in LRS:
        for arch in ARCHS:
            sweep[(arch, lr)] = train(args, arch, lr, SELECTION_SEED, sweep)
    chosen = {a: min(LRS, key=lambda lr, a=a: _final(sweep[(a, lr)], math.inf)) for a in ARCHS}
    runs = {(arch, seed): train(args, arch, chosen[arch], seed, sweep)
            for seed in range(1, args.seeds + 1) for arch in ARCHS}  # fmt: skip
    tests = Tested(found := measured(runs))
    page = Page(args, "lstm", "LSTM or Transformer, at the same size and time", QUESTION,
                tests=TESTS)  # fmt: skip
    page.add("## Scope", scope(runs, len(sweep), tests))
    counts = models(page, runs)
    learning_rates(page, sweep, chosen, args.steps)
    results(page, runs, found, tests, chosen)
    page.add(conclusions(found, tests, chosen, counts, args.steps))
    page.write([*sweep.values(), *runs.values()])


QUESTION = """\
What does a Transformer buy over an LSTM language model of the same size? The decoder of
`experiment=nanogpt_shakespeare_char` and an LSTM of as many parameters train on the same text
for the same steps, each at its own best peak learning rate, the rest of the recipe shared."""


UNDONE = ("pos=none", "model.bias=true")  # what the experiment sets that an RNN does not read


def overrides(args: Any, arch: str, seed: int, lr: float, target: int) -> list[str]:
    """A run of `arch` at peak lr `lr` (an LSTM of `target` parameters, its width chosen by
    xfmr, and UNDONE, which xfmr refuses unset for an RNN)."""
    common = ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}", f"seed={seed}",
              f"trainer.max_steps={args.steps}", "data.val_batches=50", f"optim.lr={lr:g}",
              f"trainer.val_check_interval={max(args.steps // 20, 1)}"]  # fmt: skip
    if arch == "decoder":
        return [*common, "arch=decoder"]
    return [*common, "arch=rnn", *UNDONE, "model.rnn_cell=lstm",
            f"model.n_layers={LSTM_LAYERS}", f"model.target_params={target}"]  # fmt: skip


def train(args: Any, arch: str, lr: float, seed: int, sweep: dict) -> Any:
    """The run `{arch}-lr{lr}-seed{seed}`; the LSTM is sized to the decoder's first run."""
    first = sweep.get(("decoder", LRS[0]))
    target = int(first.results["n_parameters"]) if first else 0
    return trained(args.runs / f"{arch}-lr{lr:g}-seed{seed}",
                   overrides(args, arch, seed, lr, target), quick=args.quick)  # fmt: skip


def scope(runs: dict[tuple[str, int], Any], swept: int, tests: Tested) -> str:
    """The runs, the data, the shared recipe, the family of tests, and what the page is not."""
    run = runs[("decoder", 1)]
    data, optim, schedule = run.config.data, run.config.optim, run.config.schedule
    steps = int(run.config.trainer.max_steps)
    tokens = steps * int(data.batch_size) * int(data.block_size)
    warmup = max(1, round(float(schedule.warmup_ratio) * steps))
    return (
        f"{swept + len(runs)} runs: {swept} to choose each architecture's peak learning rate "
        f"({', '.join(f'{lr:g}' for lr in LRS)}) on seed {SELECTION_SEED}, then {len(runs)} to "
        f"compare them at the lr chosen, seeds 1-{max(s for _, s in runs)}. Each run: {steps} "
        f"steps of {data.batch_size} windows of {data.block_size} characters, {tokens:,} tokens "
        f"(characters), from the first {1 - float(data.val_fraction):.0%} of "
        f"`{Path(str(data.path)).name}`, validated on the last {float(data.val_fraction):.0%}. "
        "Both keep the decoder's recipe but for the peak lr: AdamW, betas "
        f"{tuple(optim.betas)}, weight decay {optim.weight_decay} on matrices and embeddings "
        f"(not biases or norm gains), linear warm-up over {warmup} step{'s' * (warmup != 1)}, "
        f"cosine decay to {schedule.min_lr_ratio}x the peak at the last step, gradient clipping "
        f"at {run.config.trainer.gradient_clip_val}. Whether the LSTM would gain from less "
        "weight decay or no warm-up is not tested: the lr is the one axis the budget allows. "
        "The lr is chosen on a seed that is not compared, so that the comparison does not "
        "favour whichever side's selection run was luckiest. A decoder run and an LSTM run "
        "that share a seed share their data order, so differences are paired by seed: "
        f"{tests.count} p-values, Bonferroni-corrected together, each interval at "
        f"{tests.level:.4f} (`multiplicity.simultaneous_confidence`), so an interval excludes 0 "
        "exactly when its corrected p is below 0.05. This is early training of one recipe at "
        "one size, not where either architecture ends up. The runs trained one at a time, the "
        "only training this script ran; other work may have shared the machine's cores, and "
        "the load average in the last section covers only the script's last five minutes, so "
        "a time gap counts only where its interval over seeds excludes 0."
    )


def models(page: Page, runs: dict) -> tuple[int, int]:
    """The two models: their parameters, counted by building them at the decoder run's vocabulary
    (tied tensors once, as runs count them: each must be its run's), and how their runs differ."""
    decoder, lstm_run = pair = runs[("decoder", 1)], runs[("rnn", 1)]
    vocab_size = run_vocab_size(decoder)
    counts = [sum(p.numel() for p in fresh_model(run, vocab_size).parameters()) for run in pair]
    for run, counted in zip(pair, counts, strict=True):
        if counted != run.results.get("n_parameters"):
            raise SystemExit(f"{run.path.name} counts {counted} parameters here, its run "
                             f"{run.results.get('n_parameters')}")  # fmt: skip
    gap = counts[1] / counts[0] - 1
    said = (f"model.target_params={counts[0]}: model.d_model={lstm_run.config.model.d_model} "
            f"gives {counts[1]:,} parameters ({gap:+.2%})")  # fmt: skip
    rows = [[NAMES[arch], run.config.model.n_layers, run.config.model.d_model, count,
             run.results["n_parameters"], shown] for arch, run, count, shown
            in zip(ARCHS, pair, counts, ("-", f"{gap:+.2%}"), strict=True)]  # fmt: skip
    header = ["model", "layers", "width", "parameters (counted)", "parameters (results.json)",
              "vs decoder"]  # fmt: skip
    commands = [f"xfmr-train {' '.join(experiment_overrides(r))}" for r in pair]
    page.add(
        "## The two models",
        "The LSTM's width is xfmr's choice: its run sets `model.target_params` to the "
        "decoder's parameters, and xfmr builds the LSTM at the run's vocabulary of "
        f"{vocab_size} characters at the width whose parameter count is nearest "
        "(tied embeddings counted once; within 2%, or it refuses):"
        f"\n\n{shown_block(said)}\n\n"
        "Both are counted again here by building them; each run's results.json records its "
        "own count.",
        markdown_table(header, rows),
        "The seed-1 commands, less where the runs go:\n\n"
        + shown_block("\n".join(commands), "console"),
        "Every setting of those two runs' resolved configs that differs (seed and paths aside): "
        "the model, and `optim.lr` where the two chose different peaks; everything else, data, "
        "tokenizer, the rest of the optimizer and schedule, steps and validation, is the same. "
        "The decoder alone reads `model.bias`, `placement`, `activation`, `n_heads` and "
        "`d_ff`; torch's LSTM keeps its gate biases. The LSTM's `pos=none` and "
        "`model.bias=true` undo what the experiment sets that an RNN does not read, which xfmr "
        "refuses set for one.",
        markdown_table(["setting", "decoder", "LSTM"], _differences(decoder, lstm_run)),
    )
    return counts[0], counts[1]


def _differences(first: Any, second: Any) -> list[list[str]]:
    """The config keys whose values differ between two runs, less the seed and where each run
    writes."""
    import pandas as pd

    a, b = ({k: str(v) for k, v in pd.json_normalize(run.config.to_dict()).iloc[0].items()}
            for run in (first, second))  # fmt: skip
    own = (str(first.path), str(second.path))

    def shown(key: str) -> bool:
        values = (a.get(key, "-"), b.get(key, "-"))
        return values[0] != values[1] and key != "seed" and not any(
            v.startswith(d) for v in values for d in own)  # fmt: skip

    keys = sorted(k for k in a.keys() | b.keys() if shown(k))
    return [[k, a.get(k, "-"), b.get(k, "-")] for k in keys]


def learning_rates(page: Page, sweep: dict, chosen: dict[str, float], steps: int) -> None:
    """The sweep on the selection seed: a table of final losses and its figure."""
    rows = [[arch, *(_sweep_cell(sweep[(arch, lr)], lr == chosen[arch]) for lr in LRS),
             f"{chosen[arch]:g}"] for arch in ARCHS]  # fmt: skip
    edges = [f"the {NAMES[a]}'s ({chosen[a]:g})" for a in ARCHS if chosen[a] in (LRS[0], LRS[-1])]
    page.add(
        "## Learning rate",
        f"Final validation loss (nats) after {steps} steps on seed {SELECTION_SEED}, per "
        "architecture and peak lr; bold, and in the last column, the lr each is compared at "
        "below: its lowest (a run that diverged or left no loss is never chosen).",
        markdown_table(["arch", *(f"lr {lr:g}" for lr in LRS), "chosen lr"], rows),
        f"At the edge of the swept range: {' and '.join(edges)}; an lr beyond it might do "
        "better." if edges else "Each chosen lr lies inside the swept range.",
    )  # fmt: skip
    figure, axes = plot_axes()
    for arch in ARCHS:
        points = [(lr, _final(sweep[(arch, lr)])) for lr in LRS]
        points = [(lr, loss) for lr, loss in points if math.isfinite(loss)]
        axes.plot(*zip(*points, strict=True), marker="o", color=COLOURS[arch], label=NAMES[arch])
        axes.plot(chosen[arch], _final(sweep[(arch, chosen[arch])]), "o", ms=14,
                  mfc="none", color=COLOURS[arch])  # fmt: skip
    axes.set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss (nats)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    page.figure(figure, "lr", f"final validation loss (nats) after {steps} steps on seed "
                f"{SELECTION_SEED} against peak learning rate (log scale), one line per "
                "architecture, a run without a final loss left out; ringed: the lr chosen"
                )  # fmt: skip


def _sweep_cell(run: Any, chosen: bool) -> str:
    loss = _final(run)
    shown = f"**{loss:.3f}**" if chosen else f"{loss:.3f}"
    return shown if math.isfinite(loss) else "diverged" if run.status == "failed" else "-"


@dataclass(frozen=True)
class Measured:
    """The compared runs' values per measure, architecture and seed; `seconds` is T."""

    seconds: float
    values: dict[str, dict[str, dict[int, float]]]


def measured(runs: dict[tuple[str, int], Any]) -> Measured:
    """Each completed run's final loss, loss and step at T (the shortest one's training time;
    linear between validations, steps from (0 s, step 0); NaN before its first validation), its
    training time (the `time_s` of its last validation) and its median ms per step."""
    done = {key: run for key, run in runs.items() if run.status == "completed"}
    totals = {key: float(run.history["time_s"].iloc[-1]) for key, run in done.items()}
    seconds = min(totals.values())
    values: dict[str, dict[str, dict[int, float]]] = {}
    for (arch, seed), run in done.items():
        times = run.history["time_s"]
        read = {"final": _final(run), "at T": _at(seconds, times, run.history["val/loss"]),
                "step at T": _at(seconds, [0, *times], [0, *run.history.index]),
                "training s": totals[(arch, seed)],
                "ms/step": run.results.get("ms_per_step") or math.nan}  # fmt: skip
        for name, value in read.items():
            values.setdefault(name, {a: {} for a in ARCHS})[arch][seed] = value
    return Measured(seconds, values)


class Tested:
    """The LSTM minus the decoder for each of MEASURES, paired by seed over the seeds both have a
    value for: the difference at the simultaneous level, its Bonferroni-corrected p-values (the
    t-test's and, for a loss, TOST's against ±MARGIN, one family) and its verdict."""

    def __init__(self, found: Measured) -> None:
        self.samples = {name: _pairs(found.values[name]) for name in MEASURES}
        plain = {name: paired(*pair) for name, pair in self.samples.items()}
        self.keys = [name for name, difference in plain.items() if difference is not None]
        equivalences = [name for name in self.keys if name in LOSSES]
        raw = [plain[n].p_value for n in self.keys] + [tost(plain[n], MARGIN) for n in equivalences]
        self.count = sum(1 for p in raw if not math.isnan(p))
        self.level = simultaneous_confidence(max(self.count, 1))
        corrected = correct_p_values(raw, method="bonferroni")
        self.differences = {n: paired(*self.samples[n], confidence=self.level) for n in self.keys}
        self.p = dict(zip(self.keys, corrected, strict=False))
        self.p_equivalent = dict(zip(equivalences, corrected[len(self.keys) :], strict=True))
        # A time gap is claimed only where its corrected p, so its interval, excludes 0.
        gap = {n: f"LSTM {'slower' if d.delta > 0 else 'faster'}"
               for n, d in self.differences.items()}  # fmt: skip
        self.verdicts = {n: verdict(self.p[n], self.p_equivalent[n], MARGIN) if n in LOSSES
                         else gap[n] if self.p[n] < ALPHA else "no gap shown (interval holds 0)"
                         for n in self.keys}  # fmt: skip

    def cells(self, name: str) -> list[Any]:
        """n, Δ [simultaneous interval], test, p, p equivalent, verdict; dashes untested."""
        if name not in self.differences:
            return [len(self.samples[name][0]), *["-"] * 5]
        d, spec = self.differences[name], "+.3f" if name in LOSSES else "+.2f"
        return [d.pairs, f"{d.delta:{spec}} [{d.low:{spec}}, {d.high:{spec}}]", d.test,
                _p(self.p[name]), _p(self.p_equivalent.get(name, math.nan)),
                self.verdicts[name]]  # fmt: skip


def _pairs(by_arch: dict[str, dict[int, float]]) -> tuple[list[float], list[float]]:
    """(LSTM's, decoder's) values of the seeds both have a finite value for, in seed order."""
    rnn, decoder = by_arch["rnn"], by_arch["decoder"]
    seeds = sorted(s for s in rnn if math.isfinite(rnn[s] + decoder.get(s, math.nan)))
    return [rnn[s] for s in seeds], [decoder[s] for s in seeds]


def results(page: Page, runs: dict, found: Measured, tests: Tested, chosen: dict) -> None:
    """Per architecture, the measures over seeds; then the paired differences; then figures."""
    config = runs[("decoder", 1)].config
    header = ["arch", "peak lr", "n", "final val/loss (95% t interval)", "val/loss at T (95% t "
              "interval)", "step at T", "training s", "ms/step (95% t interval)",
              "ms/step min-max"]  # fmt: skip
    rows = [[arch, f"{chosen[arch]:g}", len(found.values["final"][arch]),
             *(_cell(found.values[m][arch]) for m in ("final", "at T")),
             f"{_mean(found.values['step at T'][arch]):.0f}",
             f"{_mean(found.values['training s'][arch]):.1f}",
             _cell(found.values["ms/step"][arch], ".1f"),
             "-".join(f"{f(_kept(found.values['ms/step'][arch])):.1f}" for f in (min, max))]
            for arch in ARCHS]  # fmt: skip
    differences = [[MEASURES[name], *tests.cells(name)] for name in MEASURES]
    page.add(
        "## At equal steps and at equal time",
        "Each architecture at its chosen lr over its seeds: the final validation loss "
        f"(validated every {config.trainer.val_check_interval} steps on "
        f"{config.data.val_batches} batches of windows spread evenly over the validation split, "
        f"the same for every run); the loss at T = {found.seconds:.1f} s, the shortest run's "
        "training time (the `time_s` of its last validation: seconds spent training, "
        "validation excluded), so no run is read past "
        "its end, interpolated between validations (none before the first), as is the step "
        "reached (a run read before its end has not finished its cosine decay); the training "
        "time; ms/step, each run's median step (results.json), and its range over seeds. "
        "Means, with 95% t intervals over seeds, each on its own.",
        markdown_table(header, rows),
        "The LSTM minus the decoder, paired by seed: the mean of the per-seed differences, its "
        f"interval at {tests.level:.4f}, the paired t-test's and TOST's (±{MARGIN} nats) "
        "p-values, Bonferroni over the page (Scope), and the verdict. A time gap is claimed "
        "only where its interval excludes 0; timing is one machine's, at the load in the last "
        "section.",
        markdown_table(["measure", "pairs", "Δ LSTM - decoder (simultaneous interval)", "test",
                        "p (Bonferroni)", f"p equivalent ±{MARGIN} (TOST, Bonferroni)",
                        "verdict"], differences),
    )  # fmt: skip
    lrs = ", ".join(f"{NAMES[a]} {chosen[a]:g}" for a in ARCHS)
    for x in AXES:
        dashed = "; dashed: T, where the equal-time losses are read" if x == "time_s" else ""
        page.figure(_curves(runs, found.seconds, x), f"by_{x.removesuffix('_s')}",
                    f"validation loss (nats) against {AXES[x]} at each one's chosen lr ({lrs}): "
                    f"each seed's run faint, the mean over seeds bold{dashed}")  # fmt: skip


def _curves(runs: dict, seconds: float, x: str) -> Any:
    """Validation loss against `x` (step or time_s) per architecture: each seed faint, and the
    mean over seeds at each validation (over the validations every seed reached)."""
    figure, axes = plot_axes()
    for arch in ARCHS:
        histories = [r.history.reset_index() for (a, _), r in runs.items()
                     if a == arch and r.status == "completed"]  # fmt: skip
        for history in histories:
            axes.plot(history[x], history["val/loss"], color=COLOURS[arch], alpha=0.3, lw=0.8)
        if histories:
            length = min(len(h) for h in histories)
            mean = sum(h.iloc[:length][[x, "val/loss"]] for h in histories) / len(histories)
            axes.plot(mean[x], mean["val/loss"], color=COLOURS[arch], lw=1.8, label=NAMES[arch])
    if x == "time_s":
        axes.axvline(seconds, color="black", linestyle="--", linewidth=1)
    axes.set(xlabel=AXES[x], ylabel="validation loss (nats)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def conclusions(found: Measured, tests: Tested, chosen: dict, counts: tuple, steps: int) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    mean = {m: {a: _mean(found.values[m][a]) for a in ARCHS} for m in found.values}
    return "\n\n".join([
        "## What it shows",
        f"On seed {SELECTION_SEED} the decoder did best at peak lr {chosen['decoder']:g} and "
        f"the LSTM at {chosen['rnn']:g}. At those lrs, at the same size ({counts[0]} parameters "
        f"for the decoder, {counts[1]} for the LSTM, {counts[1] / counts[0] - 1:+.1%}):",
        f"- After the same {steps} steps, the decoder's validation loss is "
        f"{mean['final']['decoder']:.3f} and the LSTM's {mean['final']['rnn']:.3f}; "
        + _said(tests, "final") + ".",
        f"- At the same T = {found.seconds:.1f} s of training, where the decoder had reached "
        f"step {mean['step at T']['decoder']:.0f} and the LSTM step "
        f"{mean['step at T']['rnn']:.0f}: " + _said(tests, "at T") + ".",
        f"- A step took the decoder {mean['ms/step']['decoder']:.1f} ms and the LSTM "
        f"{mean['ms/step']['rnn']:.1f} ms (means of each run's median); "
        + _said(tests, "ms/step") + ".",
    ])  # fmt: skip


def _said(tests: Tested, name: str) -> str:
    """A measure's paired difference in words: as a difference where shown, else its verdict."""
    if name not in tests.differences:
        return "too few seeds with both values to test the difference"
    d, cells, found = tests.differences[name], tests.cells(name), tests.verdicts[name]
    shown = (f"{cells[1]} {'nats' if name in LOSSES else 'ms'}, paired over {d.pairs} seeds, "
             f"corrected p = {cells[3]}")  # fmt: skip
    if found.startswith("LSTM"):
        return f"the LSTM is {found.split()[1]} per step: {shown}"
    if found.startswith("different"):
        return f"the LSTM's loss is {'higher' if d.delta > 0 else 'lower'}: {shown}; {found}"
    return {"n": f"the difference, {shown}, holds 0 in its interval: no speed gap is claimed",
            "e": f"the difference, {shown}, is shown to lie within ±{MARGIN} nats ({found})",
            "i": f"the difference, {shown}, is inconclusive: these seeds neither show a "
                 f"difference nor rule out one as large as ±{MARGIN} nats"}[found[0]]  # fmt: skip


def _at(seconds: float, times: Any, values: Any) -> float:
    """`values` at `seconds`, linear between the given times; NaN before the first."""
    return float(np.interp(seconds, np.asarray(times, float), np.asarray(values, float), np.nan))


def _final(run: Any, missing: float = math.nan) -> float:
    """The run's final val/loss, `missing` where it has none (a run that diverged)."""
    value = run.metrics.get("val/loss")
    return float(value) if isinstance(value, float) and math.isfinite(value) else missing


def _kept(by_seed: dict[int, float]) -> list[float]:
    return [v for v in by_seed.values() if math.isfinite(v)]


def _cell(by_seed: dict[int, float], spec: str = ".3f") -> str:
    """'mean [low, high]' (95% t over seeds), the mean alone below two; '(k of n runs)' if fewer."""
    kept = _kept(by_seed)
    interval = mean_interval(kept)
    shown = f"{_mean(by_seed):{spec}}" if kept else "-"
    shown += f" [{interval[0]:{spec}}, {interval[1]:{spec}}]" if interval else ""
    partial = f" ({len(kept)} of {len(by_seed)} runs)" if 0 < len(kept) < len(by_seed) else ""
    return shown + partial


def _mean(by_seed: dict[int, float]) -> float:
    return statistics.fmean(_kept(by_seed)) if _kept(by_seed) else math.nan


def _p(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}"


if __name__ == "__main__":
    main()
