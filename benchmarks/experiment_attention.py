"""What the heads of a small character-level GPT attend to, after training on tiny Shakespeare.

    python benchmarks/experiment_attention.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (nanoGPT's CPU recipe: 4 layers x 4 heads, d 128,
block 64, 2000 steps) once per seed, draws every head's attention over one validation passage
(`xfmr-attention`, through `Run.attention`), and measures each head over windows spread across
the validation split (self, previous token, first token, word start, same character, distance
back, entropy), each beside even attention and attention to the previous token alone. Word
start counts only queries whose previous token is not a space or newline, so attention to the
previous token cannot land on it. Heads compare within a run (intervals over windows); across
seeds, only the counts of heads of each kind and each layer's mean. Writes
docs/experiments/attention.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.pages import Page, arguments, experiment_overrides, markdown_table, plot_axes, trained
from xfmr.runs.compare.multiplicity import simultaneous_confidence
from xfmr.runs.compare.stats import mean_interval

WINDOWS = 32  # validation windows the statistics average over
SPACES = ("␣", "\\n")  # xfmr-attention's labels for a space and a newline
LIFT = 0.1  # weight above the baseline's that names a measure
# Every measure of one map, a mean over its queries (see MEASURES); `word_start_all`, word start
# over every query, is the measure previous-token attention confounds, counted for comparison.
COLUMNS = ("self", "previous", "first", "word_start", "by_distance", "same_char", "distance",
           "entropy", "word_start_all")  # fmt: skip
WEIGHTS = ("self", "previous", "first", "word_start", "same_char")  # the measures a head reads as
NAMES = {"self": "self", "previous": "previous token", "first": "first token",
         "word_start": "word start", "same_char": "same character"}  # fmt: skip
REACHES = ("local", "mid-range", "broad")
BASELINES = ("even attention", "previous token only")  # rows measured as a head is
TESTS = ("t intervals over held-out windows of each head's lift over even attention (word start: "
         "over its own attention by distance), Bonferroni-simultaneous over every seed, head and "
         "measure; each block's mean as a 95% t interval over seeds.")  # fmt: skip


def main() -> None:
    args = arguments("attention", __doc__, steps=2000, seeds=3)
    block = 16 if args.quick else 64
    print(f"attention: {args.seeds} runs of {args.steps} steps")
    runs = {seed: trained(
        args.runs / f"seed{seed}",
        ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}",
         f"trainer.max_steps={args.steps}", f"data.block_size={block}", f"seed={seed}"],
        quick=args.quick,
    ) for seed in range(1, args.seeds + 1)}  # fmt: skip
    first = runs[1]
    text = args.data.read_text(encoding="utf-8")
    validation = text[int(len(text) * (1 - float(first.config.data.val_fraction))) :]
    windows = _windows(validation, block, WINDOWS)
    scores = {seed: window_scores(run, windows) for seed, run in runs.items()}
    heads = len(scores[1].names) - len(BASELINES)
    tests = len(runs) * heads * len(WEIGHTS)
    level = simultaneous_confidence(tests)
    page = Page(args, "attention", "What the heads attend to", QUESTION, tests=TESTS)
    page.add("## Scope", scope(runs, block, tests))
    page.figure(_grid(first.attention(windows[0])), "heads", "seed 1: each head's attention "
                f"over the first of the {WINDOWS} windows ({block} characters), a panel per "
                "head (rows: blocks 0 down; columns: heads 0 across); query position down, key "
                "across, colour the weight from 0 (dark) to 1 (bright); above the diagonal "
                "is masked (0)")  # fmt: skip
    page.add("## Each head, measured, seed by seed", MEASURES)
    for seed, found in scores.items():
        page.add(f"### Seed {seed}", seed_table(found, level))
    page.figure(_lift_figure(scores, level), "word_start", "word start minus by distance, per "
                f"head (bNhM: block N head M): dot the mean over the {WINDOWS} windows, bar its "
                "interval at the simultaneous level, a colour per seed; dashed line at "
                f"{LIFT}, which a bar's lower end must reach for the head to read as word "
                "start")  # fmt: skip
    page.add("## Across seeds", ACROSS, count_table(scores, level), layer_table(scores))
    page.add(conclusions(scores, level, block))
    page.write(list(runs.values()))


QUESTION = """\
What do the heads of a trained character-level GPT attend to? Attention maps are easy to draw
and easy to over-read, so each head is also measured over many windows of held-out text, each
measure beside what even attention, and attention to the previous token alone, would give, in
runs of several seeds."""

MEASURES = f"""\
Each measure is, per validation window, the mean over its queries (those with at least one
earlier token), then over the {WINDOWS} windows; ± is the half-width of a t interval over the
per-window means ({WINDOWS - 1} df) at the page's simultaneous level (Scope): an interval over
text for one trained model, not over training. **self**: weight on the query's own token;
**previous**: on the token before it; **first**: on the window's first token; **word start**:
on the latest space or newline before the query, over only the queries whose previous token is
not a space or newline (so attention to the previous token never lands on it); **by
distance**: what the head's attention by distance alone puts on those word starts (its mean
weight at each distance back, over all the window's queries, taken at each word start's
distance); **same char**: total weight on earlier copies of the query's own character;
**distance**: the mean number of tokens back the weight lies; **entropy** in nats. The last two
rows are baselines measured the same way: even attention over the causal window, and all
weight on the previous token (0 on word start by construction).

A head *reads as* a measure when the lower end of its lift's interval is at least {LIFT}: for
self, previous, first and same char the lift is the head's value minus even attention's, window
by window; for word start, the head's word start minus its by distance, so that neither
previous-token attention nor any fixed distance back counts (conservative: by distance includes
the word starts themselves). The range (local: mean distance under a quarter of even
attention's; broad: over three fifths; else mid-range) is descriptive, from the means."""


ACROSS = """\
Heads are not the same heads across seeds (head 2 of block 1 in seed 1 has nothing to do with
head 2 of block 1 in seed 2), so what compares across seeds is how many heads read as each kind
and each block's mean over its heads. First table: each run's heads of each kind; its last row
counts them by the old rule (word start over every query against even attention, which
previous-token heads pass), for comparison, not as a finding. Second: each block's mean over
its heads and the windows, then over seeds, with a 95% t interval over the seeds (each on its
own, not simultaneous). How often training makes a kind of head is what these say, not a head's
interval, which is over text for one trained model."""


def _windows(text: str, block: int, count: int) -> list[str]:
    """`count` windows of `block` characters spread evenly over `text`."""
    step = max((len(text) - block) // count, 1)
    return [text[i * step : i * step + block] for i in range(count)]


@dataclass
class Scores:
    """One run's measures: `names` the heads then BASELINES; `values` (rows, COLUMNS, windows),
    NaN where a window has no query the measure counts."""

    names: list[str]
    values: Any

    def of(self, row: int, column: str) -> list[float]:
        """Row `row`'s per-window values of `column`, the windows without one left out."""
        values = self.values[row, COLUMNS.index(column)].tolist()
        return [v for v in values if not math.isnan(v)]

    def lift(self, row: int, measure: str) -> list[float]:
        """Per window, how far row `row` lies above its baseline on `measure` (see MEASURES)."""
        values = self.values[row, COLUMNS.index(measure)]
        if measure == "word_start":
            baseline = self.values[row, COLUMNS.index("by_distance")]
        else:
            baseline = self.values[self.names.index(BASELINES[0]), COLUMNS.index(measure)]
        return [lift for lift in (values - baseline).tolist() if not math.isnan(lift)]


def window_scores(run: Any, windows: list[str]) -> Scores:
    """Every head's measures, and the baselines', over each of `windows`."""
    names, per_window = [], []
    for window in windows:
        maps = run.attention(window)
        names = [f"{_short(m.layer)} head {m.head}" for m in maps] + list(BASELINES)
        weights = torch.stack([m.weights for m in maps])  # (heads, T, T)
        per_window.append(measure(with_baselines(weights), maps[0].keys))
    return Scores(names, torch.stack(per_window, dim=-1))  # (rows, COLUMNS, windows)


def with_baselines(weights: Any) -> Any:
    """`weights` (heads, T, T) followed by even attention and previous-token-only attention."""
    length = weights.size(-1)
    even = torch.tril(torch.ones(length, length))
    even = even / even.sum(dim=1, keepdim=True)  # (T, T), rows sum to 1
    previous = torch.diag(torch.ones(length - 1), diagonal=-1)  # (T, T): all on t - 1...
    previous[0, 0] = 1.0  # ...but the first query, which has only itself
    return torch.cat([weights, even[None], previous[None]])  # (heads + 2, T, T)


def measure(weights: Any, labels: list[str]) -> Any:
    """COLUMNS of each map in `weights` (maps, T, T), each the mean over queries 1..T-1."""
    length = weights.size(-1)
    queries = torch.arange(1, length)
    rows = weights[:, 1:, :]  # (maps, T - 1, T)
    back = (queries[:, None] - torch.arange(length)[None, :]).float()  # (T - 1, T)
    codes = torch.tensor([sorted(set(labels)).index(label) for label in labels])
    same = (codes[None, :] == codes[queries][:, None]) & (back > 0)  # (T - 1, T)
    index = torch.arange(length - 1)
    per_query = {
        "self": rows[:, index, queries],
        "previous": rows[:, index, queries - 1],
        "first": rows[:, :, 0],
        "same_char": (rows * same).sum(-1),
        "distance": (rows * back.clamp_min(0)).sum(-1),
        "entropy": -(rows * torch.log(rows.clamp_min(1e-12))).sum(-1),
    }
    found = {name: values.mean(-1) for name, values in per_query.items()}
    found.update(word_start(weights, labels))
    return torch.stack([found[name] for name in COLUMNS], dim=-1)  # (maps, COLUMNS)


def word_start(weights: Any, labels: list[str]) -> dict[str, Any]:
    """Each map's (`weights`: maps, T, T) weight on the latest space or newline before a query,
    over queries whose previous token is not one (NaN without any), what its weight by distance
    puts there, and the weight on it over every query (`word_start_all`)."""
    latest, last = [], -1
    for position, label in enumerate(labels):  # latest[t]: the last space or newline before t
        latest.append(last)
        last = position if label in SPACES else last
    every = [t for t in range(1, len(labels)) if latest[t] >= 0]
    counted = [t for t in every if labels[t - 1] not in SPACES]
    nan = torch.full((weights.size(0),), math.nan)
    if not counted:
        return {"word_start": nan, "by_distance": nan, "word_start_all": nan}
    queries, starts = torch.tensor(counted), torch.tensor([latest[t] for t in counted])
    alls = torch.tensor(every), torch.tensor([latest[t] for t in every])
    return {
        "word_start": weights[:, queries, starts].mean(-1),
        "by_distance": by_distance(weights)[:, queries - starts].mean(-1),
        "word_start_all": weights[:, alls[0], alls[1]].mean(-1),
    }


def by_distance(weights: Any) -> Any:
    """(maps, T): each map's mean weight d tokens back, over the queries 1..T-1 that reach d."""
    length = weights.size(-1)
    columns = []
    for d in range(length):
        diagonal = torch.diagonal(weights, offset=-d, dim1=-2, dim2=-1)  # (maps, T - d)
        columns.append(diagonal[:, 1:].mean(-1) if d == 0 else diagonal.mean(-1))
    return torch.stack(columns, dim=-1)


def interval(values: list[float], level: float) -> tuple[float, float]:
    """(mean, half-width of its t interval at `level`); NaN half-width below two values."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if max(values) == min(values):  # no spread (a baseline's constant): exact, no interval
        return mean, math.nan
    found = mean_interval(values, confidence=level)
    return mean, (found[1] - found[0]) / 2 if found else math.nan


def reads_as(scores: Scores, row: int, level: float) -> list[str]:
    """The measures row `row` reads as (largest lift first), then its range."""
    named = []
    for name in WEIGHTS:
        mean, half = interval(scores.lift(row, name), level)
        if mean - half >= LIFT:
            named.append((mean, NAMES[name]))
    even = scores.names.index(BASELINES[0])
    ratio = _mean(scores.of(row, "distance")) / _mean(scores.of(even, "distance"))
    reach = "local" if ratio < 0.25 else "broad" if ratio > 0.6 else "mid-range"
    return [name for _, name in sorted(named, reverse=True)] + [reach]


def seed_table(scores: Scores, level: float) -> str:
    shown = COLUMNS[:-1]  # all but word_start_all, the confounded measure
    rows = []
    for row, name in enumerate(scores.names):
        kind = "-" if name in BASELINES else ", ".join(reads_as(scores, row, level))
        cells = [_plus_minus(*interval(scores.of(row, column), level)) for column in shown]
        rows.append([name, kind, *cells])
    header = ["head", "reads as", "self", "previous", "first", "word start", "by distance",
              "same char", "distance", "entropy"]  # fmt: skip
    return markdown_table(header, rows)


def kinds(scores: Scores, level: float) -> dict[str, int]:
    """How many of a run's heads read as each kind; "old rule": word_start_all >= even's + LIFT."""
    counts = dict.fromkeys([*(NAMES[n] for n in WEIGHTS), *REACHES, "old rule"], 0)
    even = scores.names.index(BASELINES[0])
    for row in range(len(scores.names) - len(BASELINES)):
        for kind in reads_as(scores, row, level):
            counts[kind] += 1
        lift = _mean(scores.of(row, "word_start_all")) - _mean(scores.of(even, "word_start_all"))
        counts["old rule"] += lift >= LIFT
    return counts


def count_table(by_seed: dict[int, Scores], level: float) -> str:
    counted = {seed: kinds(scores, level) for seed, scores in by_seed.items()}
    rows = []
    for kind in counted[1]:
        values = [counts[kind] for counts in counted.values()]
        label = "word start, old rule (all queries vs even)" if kind == "old rule" else kind
        rows.append([label, *values, f"{_mean(values):.1f}", f"{min(values)}-{max(values)}"])
    header = ["reads as", *(f"seed {seed}" for seed in by_seed), "mean", "range"]
    return markdown_table(header, rows)


def layer_means(by_seed: dict[int, Scores], column: str) -> dict[str, list[float]]:
    """Each block's (and each baseline's) mean of `column` over its heads, one per seed;
    `word_start_lift` is word start minus by distance."""
    found: dict[str, list[float]] = {}
    for scores in by_seed.values():
        per_block: dict[str, list[float]] = {}
        for row, name in enumerate(scores.names):
            lift = column == "word_start_lift"
            value = _mean(scores.lift(row, "word_start") if lift else scores.of(row, column))
            per_block.setdefault(name.rsplit(" head", 1)[0], []).append(value)
        for block, values in per_block.items():
            found.setdefault(block, []).append(_mean(values))
    return found


LAYER_COLUMNS = {"self": "self", "previous": "previous", "word_start": "word start",
                 "word_start_lift": "word start - by distance", "same_char": "same char",
                 "distance": "distance", "entropy": "entropy"}  # fmt: skip


def layer_table(by_seed: dict[int, Scores]) -> str:
    from common.pages import interval as shown

    columns = {column: layer_means(by_seed, column) for column in LAYER_COLUMNS}
    rows = []
    for block in columns["self"]:
        row = [block]
        for column in LAYER_COLUMNS:
            values = columns[column][block]
            spread = max(values) > min(values)  # a baseline's constant has no interval
            low, high = (mean_interval(values) if spread else None) or (math.nan, math.nan)
            row.append(shown(_mean(values), low, high, signed=column == "word_start_lift"))
        rows.append(row)
    return markdown_table(["block", *LAYER_COLUMNS.values()], rows)


def scope(runs: dict[int, Any], block: int, tests: int) -> str:
    run = runs[1]
    data = run.config.data
    tokens = int(run.results.get("step") or 0) * int(data.batch_size) * block
    losses = ", ".join(f"{r.metrics.get('val/loss', math.nan):.3f}" for r in runs.values())
    minutes = ", ".join(f"{(r.results.get('wall_time_s') or 0) / 60:.1f}" for r in runs.values())
    return (
        f"{len(runs)} runs, one per seed ({', '.join(map(str, runs))}), each "
        f"`xfmr-train {' '.join(experiment_overrides(run))}` with its own `seed=`: "
        f"{run.results.get('step')} steps of {data.batch_size} windows of {block} characters, "
        f"{tokens:,} tokens (characters) seen per run, from the first "
        f"{1 - float(data.val_fraction):.0%} of `{Path(str(data.path)).name}`. Final val/loss "
        f"{losses} and training time {minutes} min, by seed (results.json). Measured on "
        f"{WINDOWS} windows of {block} characters spread evenly over the last "
        f"{float(data.val_fraction):.0%}, the same windows for every run. Intervals on a head "
        f"are at {simultaneous_confidence(tests):.5f} each: Bonferroni's simultaneous level "
        f"(`multiplicity.simultaneous_confidence`) for the {tests} lift tests the page makes "
        f"({len(runs)} seeds x {tests // len(runs) // len(WEIGHTS)} heads x {len(WEIGHTS)} "
        "measures), so that all hold together at 95%. Machine and load: the last section."
    )


def conclusions(by_seed: dict[int, Scores], level: float, block: int) -> str:
    """What the tables say, written from them."""
    counted = {seed: kinds(scores, level) for seed, scores in by_seed.items()}
    heads = len(by_seed[1].names) - len(BASELINES)

    def spread(kind: str) -> str:
        return "/".join(str(counts[kind]) for counts in counted.values())

    top = {column: max((_mean(s.of(row, column)), seed, s.names[row])
                       for seed, s in by_seed.items() for row in range(heads))
           for column in ("self", "previous")}  # fmt: skip
    largest = {column: f"{v:.3f} (seed {seed}, {name})" for column, (v, seed, name) in top.items()}
    distances = [_mean(s.of(row, "distance")) for s in by_seed.values() for row in range(heads)]
    even = _mean(layer_means(by_seed, "distance")["even attention"])
    kinds_line = "; ".join(f"{NAMES[n]} {spread(NAMES[n])}" for n in WEIGHTS)
    return "\n\n".join([
        f"## What it shows\n\nOf the {heads} heads of each run, seeds "
        f"{', '.join(map(str, by_seed))} in turn, those whose lift clears {LIFT} at the "
        f"simultaneous level: {kinds_line}. By range: local {spread('local')}, mid-range "
        f"{spread('mid-range')}, broad {spread('broad')}. "
        + ("No head puts half its weight, on average, on the query itself or on the previous "
           "token. " if max(top.values())[0] < 0.5 else "") + "The largest mean weight on the "
        "query itself in any head is "
        f"{largest['self']}, on the previous token {largest['previous']}; "
        f"weight lies {_mean(distances):.1f} tokens back on average over heads and seeds, where "
        f"even attention over the {block}-token window puts it {even:.1f} back.",
        _word_start_finding(by_seed, level, spread),
    ])  # fmt: skip


def _word_start_finding(by_seed: dict[int, Scores], level: float, spread: Any) -> str:
    heads = len(by_seed[1].names) - len(BASELINES)
    word = {seed: [name for row, name in enumerate(scores.names[:heads])
                   if "word start" in reads_as(scores, row, level)]
            for seed, scores in by_seed.items()}  # fmt: skip
    found = [name.rsplit(" head", 1)[0] for names in word.values() for name in names]
    lifts = layer_means(by_seed, "word_start_lift")
    blocks = [b for b in lifts if b not in BASELINES]
    best = max(blocks, key=lambda b: _mean(lifts[b]))
    low, high = mean_interval(lifts[best]) or (math.nan, math.nan)
    return (
        f"Word start: by the old rule (every query, against even attention) "
        f"{spread('old rule')} heads would read as word start; measured only where the previous "
        f"token is not a space or newline, and against the head's own attention by distance, "
        f"{spread('word start')} do: "
        + "; ".join(f"seed {s}: {', '.join(n) or 'none'}" for s, n in word.items())
        + ". Over the seeds, by block: "
        + ", ".join(f"{b} {found.count(b)}" for b in blocks)
        + ("" if not found else ". The same head indices in every seed" if len({tuple(n) for n
           in word.values()}) == 1 else ". Which heads they are differs by seed (a head's index "
           "means nothing across runs)")
        + f". Averaged over its heads, {best} has the largest word-start lift, "
        f"{_mean(lifts[best]):+.3f} over seeds (95% t interval over the {len(by_seed)} seeds, "
        f"on its own: [{low:+.3f}, {high:+.3f}]); the other blocks: "
        + ", ".join(f"{b} {_mean(lifts[b]):+.3f}" for b in blocks if b != best) + "."
    )  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _plus_minus(mean: float, half: float) -> str:
    return f"{mean:.3f}" if math.isnan(half) else f"{mean:.3f} ± {half:.3f}"


def _short(layer: str) -> str:
    """backbone.blocks.2.attn -> block 2"""
    parts = layer.split(".")
    return f"block {parts[2]}" if parts[:2] == ["backbone", "blocks"] else layer


def _grid(maps: list[Any]) -> Any:
    layers = sorted({m.layer for m in maps}, key=[m.layer for m in maps].index)
    heads = max(m.head for m in maps) + 1
    figure, axes = plot_axes(len(layers), heads, figsize=(2.2 * heads, 2.2 * len(layers)))
    for m in maps:
        ax = axes[layers.index(m.layer)][m.head]
        ax.imshow(m.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"{_short(m.layer)} h{m.head}", fontsize=7)
        ax.set(xticks=[], yticks=[])
    return figure


def _lift_figure(by_seed: dict[int, Scores], level: float) -> Any:
    figure, ax = plot_axes()
    heads = len(by_seed[1].names) - len(BASELINES)
    for offset, (seed, scores) in enumerate(by_seed.items()):
        found = [interval(scores.lift(row, "word_start"), level) for row in range(heads)]
        x = [row + (offset - (len(by_seed) - 1) / 2) * 0.2 for row in range(heads)]
        ax.errorbar(x, [m for m, _ in found], yerr=[h for _, h in found], fmt="o", ms=3,
                    capsize=2, label=f"seed {seed}")  # fmt: skip
    ax.axhline(LIFT, color="grey", linestyle="--", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xticks(range(heads), [n.replace("block ", "b").replace(" head ", "h")
                                 for n in by_seed[1].names[:heads]], fontsize=7)  # fmt: skip
    ax.set(xlabel="head", ylabel="word start - by distance (attention weight)")
    ax.legend(fontsize=8)
    return figure


if __name__ == "__main__":
    main()
