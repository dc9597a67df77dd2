"""What the heads of a small character-level GPT attend to, after training on tiny Shakespeare.

    python benchmarks/experiment_attention.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (nanoGPT's CPU recipe: 4 layers x 4 heads, d 128,
block 64, 2000 steps), draws every head's attention over one validation passage
(`xfmr-attention`, through `Run.attention`), and measures each head over windows spread across
the validation split: attention to the token itself, the one before, the first token, the
latest space or newline (where the current word starts), earlier copies of the query's own
character, its mean distance back and its entropy, each beside what attention spread evenly
over the causal window would give. Writes docs/experiments/attention.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from common.pages import Page, arguments, experiment_overrides, markdown_table, trained

WINDOWS = 32  # validation windows the statistics average over
SPACES = ("␣", "\\n")  # xfmr-attention's labels for a space and a newline


def main() -> None:
    args = arguments("attention", __doc__, steps=2000, seeds=1)
    block = 16 if args.quick else 64
    print(f"attention: 1 run of {args.steps} steps")
    run = trained(
        args.runs / "gpt",
        ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}",
         f"trainer.max_steps={args.steps}", f"data.block_size={block}"],
        quick=args.quick,
    )  # fmt: skip
    text = args.data.read_text(encoding="utf-8")
    validation = text[int(len(text) * (1 - float(run.config.data.val_fraction))) :]
    windows = _windows(validation, block, WINDOWS)
    stats = head_statistics(run, windows)
    page = Page(args, "attention", "What the heads attend to", QUESTION)
    page.add(
        "## The run",
        f"`xfmr-train {' '.join(experiment_overrides(run))}`: final val/loss {run.metrics.get('val/loss', math.nan):.3f} "
        f"after {run.results.get('step')} steps.",
    )
    maps = run.attention(windows[0])
    page.figure(_grid(maps), "heads", "every head's attention over one validation passage "
                "(query down, key across; brighter is more weight)")  # fmt: skip
    page.add("## Each head, measured", MEASURES, _table(stats, block))
    page.add(conclusions(stats, block))
    page.write([run])


QUESTION = """\
What do the heads of a trained character-level GPT attend to? Attention maps are easy to draw
and easy to over-read, so each head is also measured over many windows of held-out text, and
every measure stands beside what attention spread evenly over the causal window would give."""

MEASURES = f"""\
Each measure is the mean over the queries of {WINDOWS} validation windows (queries with at
least one earlier token): **self**, weight on the query's own token; **previous**, on the token
before it; **first**, on the window's first token; **word start**, on the latest space or
newline before the query (where the current word starts); **same char**, total weight on
earlier copies of the query's own character; **distance**, the mean number of tokens back the
weight lies; **entropy** in nats. The last row is even attention over the causal window. A head
*reads as* the measures that hold at least 0.1 more weight than even attention gives, largest
first, and by its mean distance as local (under a quarter of even attention's), broad (over
three fifths) or mid-range."""


@dataclass
class HeadStats:
    self_: float = 0.0
    previous: float = 0.0
    first: float = 0.0
    word_start: float = 0.0
    same_char: float = 0.0
    distance: float = 0.0
    entropy: float = 0.0


WEIGHTS = ("self_", "previous", "first", "word_start", "same_char")  # fractions of weight
NAMES = {"self_": "self", "previous": "previous token", "first": "first token",
         "word_start": "word start", "same_char": "same character"}  # fmt: skip


def _windows(text: str, block: int, count: int) -> list[str]:
    """`count` windows of `block` characters spread evenly over `text`."""
    step = max((len(text) - block) // count, 1)
    return [text[i * step : i * step + block] for i in range(count)]


def head_statistics(run: Any, windows: list[str]) -> dict[tuple[str, int], HeadStats]:
    """Each head's measures averaged over `windows`, and ("even", 0): attention spread evenly
    over each query's causal window, measured the same way."""
    import torch

    totals: dict[tuple[str, int], list[HeadStats]] = {}
    for window in windows:
        maps = run.attention(window)
        labels = maps[0].keys
        length = len(labels)
        even = torch.tril(torch.ones(length, length))
        even = even / even.sum(dim=1, keepdim=True)  # (T, T), rows sum to 1
        for key, weights in [((m.layer, m.head), m.weights) for m in maps] + [(("even", 0), even)]:
            totals.setdefault(key, []).append(_measure(weights, labels))
    return {key: _mean(values) for key, values in totals.items()}


def _measure(weights: Any, labels: list[str]) -> HeadStats:
    """One map's measures, over its queries 1..T-1."""
    import torch

    length = weights.size(0)
    found = HeadStats()
    positions = torch.arange(length)
    last_space = -1
    for t in range(1, length):
        row = weights[t, : t + 1]  # (t + 1,) the causal window
        if labels[t - 1] in SPACES:
            last_space = t - 1
        found.self_ += float(row[t])
        found.previous += float(row[t - 1])
        found.first += float(row[0])
        found.word_start += float(row[last_space]) if last_space >= 0 else 0.0
        same = [s for s in range(t) if labels[s] == labels[t]]
        found.same_char += float(row[same].sum()) if same else 0.0
        found.distance += float((row * (t - positions[: t + 1])).sum())
        found.entropy += float(-(row * torch.log(row.clamp_min(1e-12))).sum())
    for field in fields(found):
        setattr(found, field.name, getattr(found, field.name) / (length - 1))
    return found


def _mean(values: list[HeadStats]) -> HeadStats:
    return HeadStats(**{f.name: sum(getattr(v, f.name) for v in values) / len(values)
                        for f in fields(HeadStats)})  # fmt: skip


LIFT = 0.1  # weight above even attention's that names a measure


def role(stats: HeadStats, even: HeadStats) -> str:
    """What a head reads as: the measures well above even attention, and its range."""
    lifts = sorted(((getattr(stats, n) - getattr(even, n), n) for n in WEIGHTS), reverse=True)
    named = [NAMES[n] for lift, n in lifts if lift >= LIFT]
    ratio = stats.distance / even.distance
    reach = "local" if ratio < 0.25 else "broad" if ratio > 0.6 else "mid-range"
    return ", ".join([*named, reach])


def _table(stats: dict[tuple[str, int], HeadStats], block: int) -> str:
    even = stats[("even", 0)]
    rows = []
    for (layer, head), found in stats.items():
        named = "even attention" if layer == "even" else f"{_short(layer)} head {head}"
        kind = "-" if layer == "even" else role(found, even)
        rows.append([named, kind, *(getattr(found, f.name) for f in fields(HeadStats))])
    header = ["head", "reads as", "self", "previous", "first", "word start", "same char",
              "distance", "entropy"]  # fmt: skip
    return markdown_table(header, rows)


def _short(layer: str) -> str:
    """backbone.blocks.2.attn -> block 2"""
    parts = layer.split(".")
    return f"block {parts[2]}" if parts[:2] == ["backbone", "blocks"] else layer


def _grid(maps: list[Any]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({m.layer for m in maps}, key=[m.layer for m in maps].index)
    heads = max(m.head for m in maps) + 1
    figure, axes = plt.subplots(len(layers), heads, figsize=(2.2 * heads, 2.2 * len(layers)),
                                squeeze=False, layout="constrained")  # fmt: skip
    for m in maps:
        ax = axes[layers.index(m.layer)][m.head]
        ax.imshow(m.weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"{_short(m.layer)} h{m.head}", fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    return figure


def conclusions(stats: dict[tuple[str, int], HeadStats], block: int) -> str:
    """What the measures say, written from them."""
    even = stats[("even", 0)]
    heads = {key: found for key, found in stats.items() if key[0] != "even"}
    by_measure = []
    for name in WEIGHTS:
        lifted = [f"{_short(layer)} h{head}" for (layer, head), found in heads.items()
                  if getattr(found, name) - getattr(even, name) >= LIFT]  # fmt: skip
        by_measure.append(f"{NAMES[name]}: {', '.join(lifted) or 'none'}")
    reach = {}
    for (layer, head), found in heads.items():
        reach.setdefault(role(found, even).rsplit(", ", 1)[-1], []).append(
            f"{_short(layer)} h{head}"
        )
    ranges = [f"{name}: {', '.join(reach[name])}" for name in ("local", "mid-range", "broad")
              if name in reach]  # fmt: skip
    mean = sum(found.distance for found in heads.values()) / len(heads)
    return (
        "## What it shows\n\nHeads holding at least "
        f"{LIFT} more weight than even attention on each measure: "
        + "; ".join(by_measure)
        + f".\n\nBy range: {'; '.join(ranges)}. Across heads, weight lies {mean:.1f} tokens back "
        f"on average, where even attention over the {block}-token window would put it "
        f"{even.distance:.1f} back."
    )


if __name__ == "__main__":
    main()
