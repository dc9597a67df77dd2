"""Recipe choices on a small GPT: which of a modern recipe's changes help at this scale, at equal
tokens and at equal wall-clock time?

    python benchmarks/experiment_recipes.py --data ../shared/data/tinyshakespeare/input.txt \\
        --multi30k ../shared/data/multi30k

Trains `experiment=nanogpt_shakespeare_char` (AdamW, learned positions, GELU, a tied head: the
baseline) with one change at a time (Muon, rotary, ReLU², q/k norm, logit soft-capping, an untied
head) and all of them together, --seeds seeds each; and `experiment=transformer_multi30k` with
and without `data.packing=true` (packing applies only where batches are padded) when --multi30k
names Multi30k's directory. Each setting's validation loss is set against its baseline's, paired
by seed, at equal tokens (`xfmr-compare --at step=N`) and at equal training time (`--at time=S`,
S the shortest run's), with intervals at Bonferroni's simultaneous level, a TOST against MARGIN
and every p-value Holm-corrected as one family; then the steps, tokens and seconds each mean
curve takes to reach the baseline's final validation loss. Writes docs/experiments/recipes.md.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from common.family import Family, paired_at
from common.pages import Page, arguments, experiment_overrides, markdown_table, plot_axes, trained
from xfmr.runs.compare.points import Point, history_points, interpolate, value_at
from xfmr.runs.compare.runs import read_run
from xfmr.runs.compare.stats import mean_interval

# Fixed before the runs. Gemma 2's final-logit cap, as published: the page asks whether a
# recipe's choices help as they are adopted, not tuned here. A character model's logits rarely
# pass ~10 at this size, where 30 tanh(x / 30) bends them by under 4%, so the cap may do nothing.
SOFTCAP = 30
QK_NORM = "layernorm"  # the model's own norm (the recipe's `model.norm`), over each head's q and k
CHANGES = {
    # Muon shares AdamW's lr and decay (adjust_lr_fn=match_rms_adamw); `~optim.betas` leaves the
    # AdamW groups optim=muon's default betas, the recipe's own [0.9, 0.99] (as the runs were made).
    "muon": ["optim=muon", "~optim.betas"],
    "rotary": ["pos=rotary"],
    "relu2": ["model.activation=relu2"],
    "qk_norm": [f"model.qk_norm={QK_NORM}"],
    "softcap": [f"model.logit_softcap={SOFTCAP}"],
    "untied": ["model.tie_embeddings=false"],
}
BASELINE, PADDED = "baseline", "padded"
SETTINGS = {BASELINE: [], **CHANGES, "all": [o for change in CHANGES.values() for o in change]}
PACKING = {PADDED: [], "packed": ["data.packing=true"]}
MULTI30K = ("train.de", "train.en", "val.de", "val.en")
QUICK_MULTI30K = ("size=tiny", "tokenizer.vocab_size=300", "data.batch_size=8",
                  "throughput.peak_tflops=1")  # fmt: skip
VAL_BATCHES = 50
# Fixed before the runs: 0.05 nats is a 5% change in perplexity (e^0.05 = 1.05), about the
# smallest gain worth changing a recipe for at this size; a difference shown within it is none.
MARGIN = 0.05
TESTS = (
    "paired t-tests by seed of each setting's validation loss against its baseline's, at equal "
    "tokens and at equal training time (Muon, rotary, ReLU², q/k norm, soft-capping, an untied "
    "head and all together on tiny Shakespeare; packing on Multi30k), each with a TOST for "
    "equivalence within ±0.05 nats; all 32 p-values Holm-corrected together, intervals at "
    "Bonferroni's simultaneous level."
)


def main() -> None:
    args = arguments("recipes", __doc__, steps=1000, seeds=3, more=_more)
    if args.quick:
        args.multi30k_steps = min(args.multi30k_steps, 20)
    print(f"recipes: {len(SETTINGS)} settings x {args.seeds} seeds x {args.steps} steps"
          + (f"; packing 2 x {args.seeds} x {args.multi30k_steps}" if args.multi30k else ""))  # fmt: skip
    groups = {"shakespeare": shakespeare(args)}
    if args.multi30k:
        groups["multi30k"] = multi30k(args)
    found = {name: measured(runs) for name, runs in groups.items()}
    tests = tested(found)
    page = Page(args, "recipes", "Recipe choices at small scale", QUESTION, tests=TESTS)
    page.add("## Scope", scope(args, groups, found, tests))
    budgets(page, found, tests)
    reaching(page, found)
    page.figure(_plot(found), "curves", CURVES_CAPTION)
    page.add(conclusions(found, tests))
    page.write([run for runs in groups.values() for run in runs.values()],
               steps=f"{args.steps} (Shakespeare) or {args.multi30k_steps} (Multi30k)")  # fmt: skip


def _more(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--multi30k", type=_multi30k_dir, help=f"a directory of {MULTI30K}")
    parser.add_argument("--multi30k-steps", type=int, default=150, help="steps per Multi30k run")


def _multi30k_dir(value: str) -> Path:
    missing = [name for name in MULTI30K if not (Path(value) / name).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{value}: no {', '.join(missing)} there (Multi30k's)")
    return Path(value)


QUESTION = """\
Which of a modern recipe's choices (Muon, rotary positions, ReLU², q/k norm, logit soft-capping,
an untied head, packing) help a small model, and do they help at equal tokens, at equal
wall-clock time, or both? Each is one change to `experiment=nanogpt_shakespeare_char`, all of
them together one more; packing, which only removes padding, is tried on
`experiment=transformer_multi30k`."""


def shakespeare(args: Any) -> dict[tuple[str, int], Any]:
    return {(name, seed): trained(
                args.runs / f"{name}-seed{seed}",
                ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}", *changes,
                 f"seed={seed}", f"trainer.max_steps={args.steps}",
                 f"trainer.val_check_interval={max(args.steps // 10, 1)}",
                 f"data.val_batches={VAL_BATCHES}"],
                quick=args.quick)
            for name, changes in SETTINGS.items() for seed in range(1, args.seeds + 1)}  # fmt: skip


def multi30k(args: Any) -> dict[tuple[str, int], Any]:
    """Padded against packed batches; quick mode's own shrinking, since the text runs' (QUICK)
    sets keys parallel data has not."""
    source, target, val_source, val_target = (args.multi30k / name for name in MULTI30K)
    steps = args.multi30k_steps
    common = ["experiment=transformer_multi30k", f"data.train_source={source}",
              f"data.train_target={target}", f"data.val_source={val_source}",
              f"data.val_target={val_target}", f"trainer.max_steps={steps}",
              f"trainer.val_check_interval={max(steps // 5, 1)}",
              *(QUICK_MULTI30K if args.quick else ())]  # fmt: skip
    return {(name, seed): trained(args.runs / f"multi30k-{name}-seed{seed}",
                                  [*common, *changes, f"seed={seed}"], quick=False)
            for name, changes in PACKING.items() for seed in range(1, args.seeds + 1)}  # fmt: skip


def measured(runs: dict[tuple[str, int], Any]) -> dict[str, Any]:
    """One corpus's runs read as `xfmr-compare` reads them, each setting's value at equal steps
    (equal tokens) and at the equal time S, and the baseline's final loss as the target."""
    read = {key: read_run(run.path) for key, run in runs.items() if run}
    baseline = next(name for name, _ in runs)
    steps = max(r.step or 0 for r in read.values())
    ends = [
        points[-1][0] for r in read.values() if (points := history_points(r, "val/loss", "time"))
    ]
    seconds = math.floor(min(ends) * 10) / 10 if ends else math.nan
    at = {"tokens": Point("step", steps), "time": Point("time", seconds)}
    values = {axis: {} for axis in at}
    for (name, seed), run in read.items():
        for axis, point in at.items():
            value = value_at(run, "val/loss", point)
            if value is not None:
                values[axis].setdefault(name, {})[seed] = value
    target = _mean(list(values["tokens"].get(baseline, {}).values()))
    return {"runs": runs, "read": read, "baseline": baseline, "steps": steps,
            "seconds": seconds, "values": values, "target": target}  # fmt: skip


def tested(found: dict[str, dict]) -> Family:
    """Every setting against its corpus's baseline on the seeds both ran, at each budget."""
    made = {}
    for group in found.values():
        for axis, by_setting in group["values"].items():
            base = by_setting.get(group["baseline"], {})
            for name, losses in by_setting.items():
                if name != group["baseline"]:
                    seeds = sorted(set(losses) & set(base))
                    made[(axis, name)] = paired_at([losses[s] for s in seeds],
                                                   [base[s] for s in seeds])  # fmt: skip
    return Family(made, MARGIN, correction="holm")


def scope(args: Any, groups: dict, found: dict, tests: Family) -> str:
    run = groups["shakespeare"][(BASELINE, 1)]
    data = run.config.data
    tokens = int(run.results.get("tokens_per_step") or 0) * found["shakespeare"]["steps"]
    return (
        f"Tiny Shakespeare: {len(SETTINGS)} settings x seeds 1-{args.seeds}, each `xfmr-train "
        f"{' '.join(experiment_overrides(run))}` with its own changes and `seed=`: "
        f"{found['shakespeare']['steps']} steps of {data.batch_size} windows of "
        f"{data.block_size} characters, {tokens:,} tokens per run, validated every "
        f"{run.config.trainer.val_check_interval} steps on {data.val_batches} batches spread "
        f"evenly over the last {float(data.val_fraction):.0%}. The changes: "
        + "; ".join(f"{name} `{' '.join(o)}`" for name, o in CHANGES.items())
        + f"; all: every one of them. Muon takes the recipe's lr and decay for both its groups "
        "(`adjust_lr_fn=match_rms_adamw`); `~optim.betas` leaves its AdamW groups optim=muon's "
        "default betas, the recipe's own [0.9, 0.99]. The soft-cap, "
        f"{SOFTCAP}, is Gemma 2's, fixed before the runs and not tuned: the page asks whether "
        "the choice as published helps; at this size a character model's logits rarely pass "
        f"~10, where {SOFTCAP} tanh(x/{SOFTCAP}) bends them by under 4%. q/k norm is "
        f"`{QK_NORM}`, the model's own norm. Packing does not apply to these runs: a text "
        "block is a full window of the corpus, with no padding to remove (xfmr refuses "
        "`data.packing=true` for a language model). "
        + _multi30k_scope(args, groups, found)
        + "A setting and its baseline that share a seed share their data order, so every "
        "difference is paired by seed. Equal tokens: every run at the last step (`xfmr-compare "
        "--at step=N`; per step every text run sees the same tokens and every Multi30k run the "
        "same sentences, which xfmr's token count, padding included, would not show as equal). "
        "Equal time: every run at S, the shortest training time (validation excluded) of its "
        "corpus's runs (`--at time=S`), read off its validation curve, linear between "
        "validations; a slower setting is read there before its learning rate has decayed, "
        "as a run given S seconds and a schedule to fit them would not be. One run at a time "
        "on one thread, so times are comparable; a time gap inside the seeds' spread is not "
        f"claimed. The page tests {len(tests.keys)} differences, each also for equivalence "
        f"within ±{MARGIN} nats (fixed before the runs: a 5% change in perplexity, "
        f"e^{MARGIN} = {math.exp(MARGIN):.3f}): {tests.explained()} With {args.seeds} seeds "
        "and that many tests an interval is wide; only a large or very steady effect is shown "
        "either way. Intervals on one setting's mean are 95% t intervals, each on its own."
    )


def _multi30k_scope(args: Any, groups: dict, found: dict) -> str:
    if "multi30k" not in groups:
        return "Packing was not run (no --multi30k). "
    run = groups["multi30k"][(PADDED, 1)]
    return (
        f"Multi30k (German to English): padded and packed batches x seeds 1-{args.seeds}, each "
        f"`xfmr-train {' '.join(experiment_overrides(run))}`, the packed with "
        f"`data.packing=true`: {found['multi30k']['steps']} steps of {run.config.data.batch_size}"
        f" sentence pairs, validated on the whole validation split every "
        f"{run.config.trainer.val_check_interval} steps; this "
        "is early training of that recipe, far from its 4,000 steps. Packing keeps each batch's "
        "sentences and their losses, and lays them into fewer rows. "
    )


def _losses(found: dict, tests: Family, axis: str) -> list[list[Any]]:
    rows = []
    for corpus, group in found.items():
        by_setting, ms = group["values"][axis], _ms_per_step(group)
        for name in by_setting:
            rows.append([name, corpus, len(by_setting[name]), _cell(list(by_setting[name].values())),
                         *tests.cells((axis, name)), f"{_mean(ms.get(name, [])):.1f}",
                         _steps_by(group, name, axis)])  # fmt: skip
    return rows


def _steps_by(group: dict, name: str, axis: str) -> str:
    """The steps each run of `name` had taken at the budget: all of them at equal tokens."""
    if axis == "tokens":
        return str(group["steps"])
    at = [_x_at(group["read"][key], group["seconds"]) for key in group["read"] if key[0] == name]
    return f"{_mean([a for a in at if a is not None]):.0f}"


def _x_at(run: Any, seconds: float) -> float | None:
    """The step a run had reached after `seconds` of training, linear between validations."""
    return interpolate([(e["time_s"], e["step"]) for e in run.history if e.get("time_s")], seconds)


def budgets(page: Page, found: dict, tests: Family) -> None:
    for axis, title, words in (
        ("tokens", "Equal tokens", "at the last step (`--at step=N`), every run of a corpus "
         "having seen the same data"),
        ("time", "Equal training time", "at S seconds of training (`--at time=S`): "
         + ", ".join(f"{c} S = {g['seconds']:.1f} s" for c, g in found.items())),
    ):  # fmt: skip
        header = ["setting", "data", "n", "val/loss (95% t interval)",
                  "Δ vs baseline (simultaneous interval)", "test", "p (Holm)",
                  f"p equivalent ±{MARGIN} (TOST, Holm)", "verdict", "ms/step",
                  "steps taken"]  # fmt: skip
        page.add(
            f"## {title}",
            f"Validation loss {words}, per setting: mean with its 95% t interval over seeds, and "
            "the difference to the corpus's baseline (Shakespeare: baseline; Multi30k: padded): "
            "the mean of the per-seed differences, its interval at the page's simultaneous "
            "level, the paired t-test's and TOST's p-values, Holm-corrected over the page's "
            "tests (Scope), and the verdict. Negative: the setting's loss is lower. ms/step: "
            "the runs' mean training time per step; steps taken: by the budget (mean over seeds).",
            markdown_table(header, _losses(found, tests, axis)),
        )


def crossing(points: list[tuple[float, float]], target: float) -> float | None:
    """The first x at which the curve `points` (x, loss) comes down to `target`: linear
    between the validation before and the one at or below it; None if it never does."""
    for i, (x, loss) in enumerate(points):
        if loss <= target:
            if i == 0:
                return x
            (x0, y0) = points[i - 1]
            return x0 + (x - x0) * (y0 - target) / (y0 - loss)
    return None


def mean_curve(group: dict, name: str, axis: str) -> list[tuple[float, float]]:
    """(mean x, mean val/loss) over a setting's seeds at each validation they all made."""
    curves = [
        history_points(r, "val/loss", axis) for (n, _), r in group["read"].items() if n == name
    ]
    length = min((len(c) for c in curves), default=0)
    return [(_mean([c[i][0] for c in curves]), _mean([c[i][1] for c in curves]))
            for i in range(length)]  # fmt: skip


def reached(group: dict, name: str) -> dict[str, Any]:
    """How far `name`'s mean curve goes to reach the baseline's final loss, in steps and in
    training seconds, and how many of its runs reach it."""
    target = group["target"]
    runs = [r for (n, _), r in group["read"].items() if n == name]
    reaching = sum(
        crossing(history_points(r, "val/loss", "step"), target) is not None for r in runs
    )
    steps, seconds = (crossing(mean_curve(group, name, axis), target) for axis in ("step", "time"))
    base_steps, base_seconds = (crossing(mean_curve(group, group["baseline"], axis), target)
                                for axis in ("step", "time"))  # fmt: skip
    return {"runs": len(runs), "reaching": reaching, "steps": steps, "seconds": seconds,
            "step share": _share(steps, base_steps), "time share": _share(seconds, base_seconds)}  # fmt: skip


def reaching(page: Page, found: dict) -> None:
    rows = []
    for corpus, group in found.items():
        first = next(iter(group["runs"].values()))
        per_step = first.results.get("tokens_per_step") if corpus == "shakespeare" else None
        for name in group["values"]["tokens"]:
            got = reached(group, name)
            tokens = f"{got['steps'] * per_step:,.0f}" if per_step and got["steps"] else "-"
            rows.append([name, corpus, f"{group['target']:.3f}",
                         f"{got['reaching']} of {got['runs']}", _number(got["steps"], ".0f"),
                         tokens, got["step share"], _number(got["seconds"], ".1f"),
                         got["time share"]])  # fmt: skip
    header = ["setting", "data", "target val/loss", "runs reaching it", "steps (mean curve)",
              "tokens", "share of baseline's steps", "training s (mean curve)",
              "share of baseline's time"]  # fmt: skip
    page.add(
        "## Tokens to reach the baseline's final loss",
        "The target is the baseline's final validation loss, mean over its seeds. For each "
        "setting, the mean of its seeds' validation curves (at each validation, mean step or "
        "training time, mean loss) and where it first comes down to the target, linear between "
        "validations: in steps (tokens on Shakespeare; on Multi30k a step is "
        "a batch of sentence pairs, the same for both) and in training seconds; 'not reached' "
        "where it never does within the run. The baseline's own mean curve reaches it at its "
        "last validation by construction. Runs reaching it: per seed, on its own curve.",
        markdown_table(header, rows),
    )


def _share(value: float | None, baseline: float | None) -> str:
    return f"{value / baseline:.0%}" if value is not None and baseline else "-"


CURVES_CAPTION = (
    "validation loss (nats) of each setting's mean curve over its seeds, against training steps "
    "(left) and training seconds, validation excluded (right); Shakespeare above, Multi30k "
    "below where it ran; dotted: the baseline's final loss, the target of the reach table"
)


def _plot(found: dict) -> Any:
    from xfmr.runs.compare.figures import colours

    figure, axes = plot_axes(len(found), 2, figsize=(12, 4 * len(found)))
    for row, (corpus, group) in enumerate(found.items()):
        names = list(group["values"]["tokens"])
        for column, axis in enumerate(("step", "time")):
            panel = axes[row][column]
            for name, colour in zip(names, colours(len(names)), strict=True):
                curve = mean_curve(group, name, axis)
                panel.plot([x for x, _ in curve], [y for _, y in curve], label=name, color=colour,
                           linewidth=2.2 if name == group["baseline"] else 1.2, marker=".")  # fmt: skip
            panel.axhline(group["target"], color="black", linestyle=":", linewidth=1)
            panel.set(title=corpus, ylabel="validation loss (nats)",
                      xlabel="step" if axis == "step" else "training seconds")  # fmt: skip
            panel.grid(alpha=0.3)
        axes[row][0].legend(fontsize="small")
    return figure


def conclusions(found: dict, tests: Family) -> str:
    """What the tables say, written from them (so a rerun that finds otherwise says so)."""

    def listed(axis: str) -> str:
        keys = [k for k in tests.keys if k[0] == axis]
        groups = {
            "lower loss, beyond chance": [k for k in keys if tests.says(k, "different")
                                          and tests.differences[k].delta < 0],
            "higher loss, beyond chance": [k for k in keys if tests.says(k, "different")
                                           and tests.differences[k].delta > 0],
            f"shown within ±{MARGIN} nats of the baseline": [
                k for k in keys if tests.says(k, "equivalent") or tests.says(k, "different, but")],
            f"inconclusive (neither a difference nor one within ±{MARGIN} shown)": [
                k for k in keys if tests.says(k, "inconclusive")],
        }  # fmt: skip
        said = [f"{words}: " + ", ".join(f"{k[1]} ({tests.differences[k].delta:+.3f})" for k in ks)
                for words, ks in groups.items() if ks]  # fmt: skip
        return "; ".join(said) + "." if said else "no setting could be tested."

    parts = [
        "## What it shows",
        f"At equal tokens, {listed('tokens')}",
        f"At equal training time, {listed('time')}",
    ]
    for corpus, group in found.items():
        reach = {name: reached(group, name) for name in group["values"]["tokens"]}
        sooner = [
            f"{n} ({r['step share']} of the steps, {r['time share']} of the time)"
            for n, r in reach.items()
            if n != group["baseline"] and r["steps"] is not None
        ]
        never = [n for n, r in reach.items() if r["steps"] is None]
        parts.append(
            f"{corpus.capitalize()}: the mean curves that reach the baseline's final loss "
            f"({group['target']:.3f}): {', '.join(sooner) or 'none'}; "
            f"not reached: {', '.join(never) or 'none'}. " + _pace(group)
        )  # fmt: skip
    parts.append("These are early-training results of one small recipe with a few seeds "
                 "(Scope); a choice that does not help here may help a larger model or a longer "
                 "run, and one that helps here need not carry over.")  # fmt: skip
    return "\n\n".join(parts)


def _pace(group: dict) -> str:
    """Each setting's time per step against its baseline's, and how far the baseline's mean
    curve fell over the run (a curve that hardly falls cannot show a faster setting's gain)."""
    per_run = _ms_per_step(group)
    spread = max(max(v) / min(v) - 1 for v in per_run.values() if v)
    base = _mean(per_run.pop(group["baseline"]))
    ms = {name: _mean(values) for name, values in per_run.items()}
    curve = mean_curve(group, group["baseline"], "step")
    fell = f"{curve[0][1]:.3f} at step {curve[0][0]:.0f} to {curve[-1][1]:.3f}" if curve else "-"
    return (
        "Time per training step against the baseline's (one thread, one run at a time): "
        + ", ".join(f"{name} x{value / base:.2f}" for name, value in ms.items())
        + f" (the runs of one setting differ by up to {spread:.0%}, so a smaller gap is not "
        f"claimed). The baseline's mean validation loss fell from {fell} at the end."
    )


def _ms_per_step(group: dict) -> dict[str, list[float]]:
    """Each setting's runs' training ms per step, as results.json gives them."""
    return {name: [r.ms_per_step for (n, _), r in group["read"].items() if n == name and r.ms_per_step]
            for name in group["values"]["tokens"]}  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _number(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    interval = mean_interval(values)
    if not interval:
        return f"{_mean(values):.3f}"
    return f"{_mean(values):.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"


if __name__ == "__main__":
    main()
