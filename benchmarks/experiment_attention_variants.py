"""Grouped-query and sliding-window attention on tiny Shakespeare: what does each cost in
validation loss, and what does each save in the KV cache?

    python benchmarks/experiment_attention_variants.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (4 layers, 4 heads, d 128, char tokens) at block
256 in five settings, --seeds seeds each: full multi-head attention (the baseline), grouped-query
attention with 2 and with 1 key/value heads (`model.n_kv_heads`), and sliding windows of 64 and
16 positions (`model.window`). Each variant's final validation loss is set against full
attention's, paired over the seeds both ran, with its interval at Bonferroni's simultaneous level
over the page's tests and an equivalence verdict (TOST against MARGIN). Then, for each setting,
a model of its shape fills a `KVCache` over prompts of several lengths and the page reports the
bytes the cache holds per token. Writes docs/experiments/attention-variants.md.
"""

from __future__ import annotations

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
    run_vocab_size,
    trained,
)
from xfmr.runs.compare.stats import mean_interval

BASELINE = "mha"
HEADS = 4  # the recipe's query heads; quick mode's tiny model is given as many
BLOCK = 256
QUICK_BLOCK = 32
VAL_BATCHES = 40
CACHE_TIMES = (1, 4)  # the table's prompt lengths, in trained blocks
CACHE_PLOT = (0.25, 0.5, 1, 2, 4)  # the plot's, likewise
# Fixed before the runs: 0.05 nats is a 5% change in perplexity (e^0.05 = 1.05), about the
# smallest loss worth giving up a cache's saving for at this size; a difference shown to lie
# within it counts as none.
MARGIN = 0.05
TESTS = (
    "paired t-tests by seed of each variant's final validation loss against full multi-head "
    "attention (grouped-query with 2 and 1 key/value heads, windows of 64 and 16), each with a "
    "TOST for equivalence within ±0.05 nats; all 8 p-values Bonferroni-corrected together, "
    "intervals at the matching simultaneous level."
)


def main() -> None:
    args = arguments("attention_variants", __doc__, steps=500, seeds=3)
    block = QUICK_BLOCK if args.quick else BLOCK
    settings = variants(block)
    print(f"attention variants: {len(settings)} settings x {args.seeds} seeds x {args.steps} steps")
    runs = {
        (name, seed): trained(
            args.runs / f"{name}-seed{seed}",
            [
                "experiment=nanogpt_shakespeare_char",
                f"data.path={args.data}",
                *settings[name],
                f"seed={seed}",
                f"trainer.max_steps={args.steps}",
                f"trainer.val_check_interval={max(args.steps // 5, 1)}",
                f"data.val_batches={VAL_BATCHES}",
                f"data.block_size={block}",
                *([f"model.n_heads={HEADS}"] if args.quick else []),
            ],
            quick=args.quick,
        )  # fmt: skip
        for name in settings
        for seed in range(1, args.seeds + 1)
    }
    finals = {name: {seed: run.metrics["val/loss"] for (n, seed), run in runs.items()
                     if n == name and isinstance(run.metrics.get("val/loss"), float)}
              for name in settings}  # fmt: skip
    tests = tested(finals)
    held = {name: cache_bytes(runs[(name, 1)], block) for name in settings}
    page = Page(args, "attention-variants", "Grouped-query and windowed attention", QUESTION,
                tests=TESTS)  # fmt: skip
    page.add("## Scope", scope(args, runs, block, tests))
    validation(page, runs, finals, tests)
    caches(page, runs, held, block)
    page.add(conclusions(runs, finals, tests, held, block))
    page.write(list(runs.values()))


QUESTION = """\
What do grouped-query attention (n_kv_heads = n_heads, n_heads/2, 1) and sliding-window attention
(all keys, 64, 16) cost a small character-level GPT in validation loss at block 256, and what do
they save in the KV cache a decoder keeps? Each variant is set in
`experiment=nanogpt_shakespeare_char` at `data.block_size=256`, nothing else changed."""


def variants(block: int) -> dict[str, list[str]]:
    """Each setting's name and overrides: full multi-head attention (the baseline), HEADS / 2 and
    1 key/value heads, windows of block / 4 and block / 16 (64 and 16 at block 256)."""
    return {
        BASELINE: [],
        f"gqa{HEADS // 2}": [f"model.n_kv_heads={HEADS // 2}"],
        "gqa1": ["model.n_kv_heads=1"],
        f"window{block // 4}": [f"model.window={block // 4}"],
        f"window{block // 16}": [f"model.window={block // 16}"],
    }


def tested(finals: dict[str, dict[int, float]]) -> Family:
    """Each variant's final val/loss against full attention's, on the seeds both ran."""
    samples = {}
    for name, losses in finals.items():
        if name != BASELINE:
            seeds = sorted(set(losses) & set(finals[BASELINE]))
            samples[name] = ([losses[s] for s in seeds], [finals[BASELINE][s] for s in seeds])
    return Family({name: paired_at(*pair) for name, pair in samples.items()}, MARGIN)


def scope(args: Any, runs: dict[tuple[str, int], Any], block: int, tests: Family) -> str:
    run = runs[(BASELINE, 1)]
    data = run.config.data
    seeds = sorted({seed for _, seed in runs})
    tokens = int(run.results.get("step") or 0) * int(data.batch_size) * block
    text = Path(str(data.path)).read_text(encoding="utf-8")
    train_chars = int(len(text) * (1 - float(data.val_fraction)))
    times = [r.results.get("wall_time_s") or math.nan for r in runs.values()]
    return (
        f"{len(runs)} runs: {len(runs) // len(seeds)} settings x seeds "
        f"{', '.join(map(str, seeds))}, each `xfmr-train {' '.join(experiment_overrides(run))}` "
        "with its own `model.n_kv_heads=` or `model.window=` and `seed=` (the baseline, full "
        "multi-head attention, is one set of runs that every variant is compared with): "
        f"{run.results.get('step')} steps of {data.batch_size} windows of {block} characters, "
        f"{tokens:,} tokens (characters) seen per run, about {tokens / train_chars:.1f} times "
        f"the {train_chars:,} characters of the training split (the first "
        f"{1 - float(data.val_fraction):.0%} of `{Path(str(data.path)).name}`; windows are "
        "drawn at any offset, so no window need repeat). The recipe's learning rate, its "
        "warm-up (5% of the steps) and cosine decay, and its batch are kept; the steps were "
        "chosen so that the 15 runs (5 settings x 3 seeds) train in about 40 minutes on one "
        "thread (a 40-step trial "
        "took 220-255 ms a step at block 256), which is the budget this page had. One run at a "
        f"time, {min(times):.0f}-{max(times):.0f} s of training each (results.json). A variant "
        "and full attention that share a seed share their data order, and a window run (a "
        "window changes no weight) its initialisation too, so differences are paired by seed "
        "(a grouped-query model's key and value projections differ in shape, so its "
        f"initialisation differs). The page tests {len(tests.keys)} differences, each also for equivalence "
        f"within ±{MARGIN} nats (the margin fixed in the script before these runs: a 5% change "
        f"in perplexity, e^{MARGIN} = {math.exp(MARGIN):.3f}): {tests.explained()} Intervals "
        "on one setting's mean are 95% t intervals over its seeds, each on its own. With "
        f"{len(seeds)} seeds and {tests.count} p-values a paired interval is wide: its half-width "
        f"is {_quantile(tests.level, len(seeds) - 1):.1f}/√{len(seeds)} times the standard "
        "deviation of the per-seed differences (the t quantile at that level and "
        f"{len(seeds) - 1} degrees of freedom), so only a large effect, or a very steady one, is "
        "shown either way. Machine and load: the last section."
    )


def validation(page: Page, runs: dict, finals: dict, tests: Family) -> None:
    """The final validation loss per setting and its paired difference to full attention."""
    from xfmr.runs.compare.figures import metric_curves, save_curves_png
    from xfmr.runs.compare.runs import find_runs

    rows = []
    for name in sorted(finals, key=lambda n: _mean(list(finals[n].values()))):
        run = runs[(name, 1)]
        rows.append([name, _shape(run)[0], _shape(run)[1], len(finals[name]),
                     _cell(list(finals[name].values())), *tests.cells(name),
                     f"{run.results.get('n_parameters') or 0:,}"])  # fmt: skip
    header = ["setting", "n_kv_heads", "window", "n", "final val/loss (95% t interval)",
              f"Δ vs {BASELINE} (simultaneous interval)", "test", "p (Bonferroni)",
              f"p equivalent ±{MARGIN} (TOST, Bonferroni)", "verdict", "params"]  # fmt: skip
    page.add(
        "## Validation loss",
        "Final validation loss of each run (validated every 5th of the run, on "
        f"{VAL_BATCHES} batches of windows spread evenly over the validation split, the same "
        "for every run), per setting: mean with its 95% t interval over seeds, and the "
        f"difference to full multi-head attention ({BASELINE}): the mean of the per-seed "
        "differences, its interval at the page's simultaneous level, the paired t-test's and "
        "TOST's p-values, Bonferroni-corrected over the page's tests (Scope), and the verdict. "
        "Positive: the variant's loss is higher. Grouped-query attention has fewer parameters "
        "(smaller key and value projections); a window changes none.",
        markdown_table(header, rows),
    )
    path = page.figures / "curves.png"
    save_curves_png(metric_curves(find_runs([run.path for run in runs.values()]), "val/loss",
                                  ["model.n_kv_heads", "model.window"]), "val/loss", path)  # fmt: skip
    page.drawn(
        path,
        "validation loss (nats) against training step, per setting (None: the default, as "
        "many key/value heads as query heads, or every key): mean over seeds (dots), band ± 1 "
        "std over seeds, each run a faint line (mostly within the band)",
    )


def cache_bytes(run: Any, block: int) -> dict[int, int]:
    """Bytes a KV cache holds after a prompt of each length of CACHE_PLOT (in blocks) runs
    through a model of `run`'s shape: all but the last token prefilled, the last decoded.
    The model is fresh: the bytes depend on the shape, not the weights, and a learned position
    table of `block` rows could not run past it, so this one has as many rows as the longest."""
    import torch

    from xfmr.nn.cache import KVCache
    from xfmr.nn.config import ModelConfig
    from xfmr.nn.models import build_model

    lengths = [int(block * times) for times in CACHE_PLOT]
    settings = run.config.model.settings()
    settings["pos"] = {**settings["pos"], "max_positions": max(lengths)}
    config = ModelConfig.from_dict({**settings, "vocab_size": run_vocab_size(run)})
    model = build_model(config).eval()
    held = {}
    with torch.no_grad():
        for length in lengths:
            cache = KVCache()
            ids = torch.zeros(1, length, dtype=torch.long)
            model(ids[:, :-1], cache=cache)
            model(ids[:, -1:], cache=cache)
            assert cache.length == length
            held[length] = cache.nbytes
    return held


def formula(run: Any, length: int) -> int:
    """Bytes the cache should hold after `length` tokens: 2 (keys, values) x layers x
    key/value heads x head dim x 4 bytes (fp32) x the positions a layer keeps, all of them
    or a window's last window - 1."""
    model = run.config.model
    kv_heads = model.n_kv_heads or model.n_heads
    kept = length if model.window is None else min(length, model.window - 1)
    return 2 * model.n_layers * kv_heads * (model.d_model // model.n_heads) * 4 * kept


def caches(page: Page, runs: dict, held: dict[str, dict[int, int]], block: int) -> None:
    """The cache's bytes per token at 1x and 4x the block, against the formula, and a plot."""
    lengths = [block * times for times in CACHE_TIMES]
    header = ["setting", "n_kv_heads", "window",
              *(f"bytes/token at {n}" for n in lengths), f"share of {BASELINE}'s at {lengths[-1]}",
              *(f"formula at {n}" for n in lengths)]  # fmt: skip
    rows = []
    for name, by_length in held.items():
        run = runs[(name, 1)]
        per_token = [by_length[n] / n for n in lengths]
        ratio = per_token[-1] / (held[BASELINE][lengths[-1]] / lengths[-1])
        rows.append([name, *_shape(run), *(f"{b:,.0f}" for b in per_token), f"{ratio:.1%}",
                     *(f"{formula(run, n) / n:,.0f}" for n in lengths)])  # fmt: skip
    page.add(
        "## KV cache",
        "Bytes the `KVCache` holds (`KVCache.nbytes`: every layer's keys and values, fp32, "
        "batch 1) after a prompt of N tokens, all but the last prefilled in one call and the "
        "last decoded, divided by N. Measured on a freshly built model of each setting's shape "
        "(from its seed-1 run's config) with a learned position table of "
        f"{max(lengths)} rows: the bytes depend on the shape, not on the weights, and the "
        f"trained runs' table has {block} rows, so cannot run past {block}. The formula "
        "columns are 2 (keys and values) x layers x key/value heads x head dim x 4 bytes x "
        "the positions each layer keeps (all N, or a window's last window - 1), divided by N: "
        f"for full attention here, {_worked(runs[(BASELINE, 1)])} bytes a position.",
        markdown_table(header, rows),
    )
    page.figure(_cache_plot(held, block), "cache", "KV cache bytes held (KiB, fp32, batch 1) "
                "against the prompt's length N, per setting, log-log; dashed: the trained "
                f"block of {block}")  # fmt: skip


def _cache_plot(held: dict[str, dict[int, int]], block: int) -> Any:
    from xfmr.runs.compare.figures import colours

    figure, axes = plot_axes()
    for (name, by_length), colour in zip(held.items(), colours(len(held)), strict=True):
        axes.plot(list(by_length), [b / 1024 for b in by_length.values()], marker="o",
                  label=name, color=colour)  # fmt: skip
    axes.axvline(block, color="black", linestyle="--", linewidth=1)
    axes.set(xscale="log", yscale="log", xlabel="prompt length N (tokens)",
             ylabel="KV cache (KiB)")  # fmt: skip
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def conclusions(runs: dict, finals: dict, tests: Family, held: dict, block: int) -> str:
    """What the tables say, written from them (so a rerun that finds otherwise says so)."""
    ranked = sorted((_mean(list(v.values())), name) for name, v in finals.items() if v)

    def where(words: str, sign: int = 0) -> list[str]:
        return [n for n in tests.keys if tests.says(n, words)
                and sign * tests.differences[n].delta >= 0]  # fmt: skip

    said = "; ".join(f"{n} {tests.cells(n)[0]}, {tests.verdicts[n]}" for n in tests.keys)
    worse, better = where("different", 1), where("different", -1)
    within = where("equivalent") + where("different, but")
    open_ = where("inconclusive")
    long = block * CACHE_TIMES[-1]
    exact = all(by_length[n] == formula(runs[(name, 1)], n)
                for name, by_length in held.items() for n in by_length)  # fmt: skip
    base = held[BASELINE][long]
    saved = ", ".join(f"{name} {by_length[long] / long:,.0f} ({by_length[long] / base:.0%})"
                      for name, by_length in held.items())  # fmt: skip
    return "\n\n".join([
        "## What it shows",
        "Final validation loss, from best to worst: "
        + ", ".join(f"{name} {v:.3f}" for v, name in ranked) + f". Against full multi-head "
        f"attention (paired over seeds, interval at {tests.level:.5f}): {said}. "
        + _listed(worse, "Worse than full attention, beyond chance over the page's tests")
        + _listed(better, "Better than full attention, beyond chance")
        + _listed(within, f"Shown within ±{MARGIN} nats of full attention")
        + _listed(open_, "Inconclusive (these seeds neither show a difference nor rule out "
                         f"one as large as ±{MARGIN}; not evidence of no difference)")
        + _falling(runs),
        f"KV cache bytes per token at {long} tokens (fp32, batch 1; share of full "
        f"attention's): {saved}. "
        + ("Every measured size equals the formula (the table's last columns). " if exact
           else "Some measured sizes differ from the formula: see the table. ")
        + "A full layer's cache grows with every token; a windowed layer's stops at window - 1 "
        "positions, so its bytes per token fall as the prompt grows, while grouped-query "
        "attention divides the bytes by n_heads / n_kv_heads at every length. The page "
        "measures loss at the trained block only; it says nothing of the windows' or the "
        "grouped heads' loss on longer texts, or of speed.",
    ])  # fmt: skip


def _worked(run: Any) -> str:
    """The formula's product for one position of `run`'s shape, factor by factor."""
    model = run.config.model
    factors = [2, model.n_layers, model.n_kv_heads or model.n_heads,
               model.d_model // model.n_heads, 4]  # fmt: skip
    return " x ".join(map(str, factors)) + f" = {math.prod(factors):,}"


def _falling(runs: dict) -> str:
    """How many runs' validation loss was still falling at their last validation."""
    lasts = [[e["val/loss"] for e in run.results.get("history") or [] if "val/loss" in e][-2:]
             for run in runs.values()]  # fmt: skip
    falling = sum(1 for last in lasts if len(last) == 2 and last[1] < last[0])
    return (
        f"{falling} of {len(runs)} runs' validation loss was still falling at their last "
        "validation: these are differences early in training, at this recipe's learning "
        "rate; the page does not test whether they hold, shrink or reverse with more steps."
    )


def _listed(names: list[str], words: str) -> str:
    return f"{words}: {', '.join(names)}. " if names else ""


def _shape(run: Any) -> tuple[int, str]:
    """(key/value heads, window) of the run's model, as the tables show them."""
    model = run.config.model
    return model.n_kv_heads or model.n_heads, "all" if model.window is None else str(model.window)


def _quantile(level: float, df: int) -> float:
    """The two-sided t quantile of a `level` interval at `df` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf((1 + level) / 2, df))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _cell(values: list[float]) -> str:
    """'mean [low, high]' of the 95% t interval over seeds; '-' without values."""
    if not values:
        return "-"
    mean, interval = _mean(values), mean_interval(values)
    return f"{mean:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else f"{mean:.3f}"


if __name__ == "__main__":
    main()
