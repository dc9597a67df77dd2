"""The coordinate check of µP (Yang et al. 2022, sec. 8 and app. D.1; microsoft/mup's
`get_coord_data`): the size of every layer's output across widths, over the first few steps of
training. Under µP each layer's coordinates keep their size as the model widens, so the
log-log slope of RMS against width stays near 0 at every step; under sp they grow with width
once training starts (Adam's updates move every coordinate of a width-d sum by ~lr, so a
layer's output moves by ~lr * d), the logits fastest.

`coord_check` trains a small decoder (2 layers, 4 heads, learned positions) on one fixed batch
of random tokens with AdamW at each width, from the same seed, recording with forward hooks the
RMS of the embedding, each block's attention and feed-forward outputs and the residual stream
after each block, and the logits, before each step's update (step 1: at initialisation).
`slopes` fits log2 RMS against log2 width per layer and step. `benchmarks/coord_check.py`
draws it as microsoft/mup does: one panel per layer, one line per step, sp beside µP.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from xfmr.nn.config import ModelConfig, PosConfig
from xfmr.nn.models import CausalLM
from xfmr.training.optim import optimizer_groups

WIDTHS = (32, 64, 128, 256, 512)


@dataclass(frozen=True)
class Coord:
    """The RMS of one layer's output at one width, before step `step`'s update (1: at init)."""

    parametrization: str
    width: int
    step: int
    layer: str
    rms: float


def layers_of(model: CausalLM) -> dict[str, nn.Module]:
    """The modules whose outputs the check records, by the name it gives them."""
    found: dict[str, nn.Module] = {"embedding": model.backbone.tok_emb}
    for index, block in enumerate(model.backbone.blocks):
        found |= {
            f"block{index}.attn": block.attn,
            f"block{index}.ffn": block.ffn,
            f"block{index}.out": block,
        }
    return found | {"logits": model.lm_head}


def coord_check(
    parametrization: str,
    *,
    widths: Sequence[int] = WIDTHS,
    steps: int = 4,
    lr: float = 3e-3,
    n_layers: int = 2,
    batch: int = 4,
    length: int = 32,
    vocab_size: int = 64,
    seed: int = 0,
) -> list[Coord]:
    """Each layer's output RMS at each width and step, under `parametrization` (sp or mup,
    with the narrowest width as µP's base)."""
    coords = []
    for width in widths:
        config = ModelConfig(
            vocab_size=vocab_size,
            n_layers=n_layers,
            n_heads=4,
            d_model=width,
            dropout=0.0,
            parametrization=parametrization,
            mup_base_width=min(widths),
            pos=PosConfig(name="learned", max_positions=length),
        )
        torch.manual_seed(seed)
        model = CausalLM(config)
        tokens = torch.randint(0, vocab_size, (batch, length + 1))  # (B, T + 1)
        adamw = functools.partial(torch.optim.AdamW, lr=lr, weight_decay=0.0)
        optimizer = adamw(optimizer_groups(model, adamw))
        for step in range(1, steps + 1):
            seen = _recorded_step(model, optimizer, tokens)
            coords += [Coord(parametrization, width, step, k, v) for k, v in seen.items()]
    return coords


def _recorded_step(
    model: CausalLM, optimizer: torch.optim.Optimizer, tokens: torch.Tensor
) -> dict[str, float]:
    """One training step on next-token loss; the RMS of each layer's output in its forward."""
    seen: dict[str, float] = {}

    def record(name: str, _module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        seen[name] = output.detach().float().pow(2).mean().sqrt().item()

    hooks = [
        module.register_forward_hook(functools.partial(record, name))
        for name, module in layers_of(model).items()
    ]
    try:
        logits = model(tokens[:, :-1])  # (B, T, V)
    finally:
        for hook in hooks:
            hook.remove()
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return seen


def slopes(coords: Sequence[Coord]) -> dict[tuple[str, str, int], float]:
    """(parametrization, layer, step) -> the least-squares slope of log2 RMS against log2
    width: 0 when a layer keeps its size as the model widens, 1 when it doubles with width."""
    series: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    for c in coords:
        point = (math.log2(c.width), math.log2(c.rms))
        series.setdefault((c.parametrization, c.layer, c.step), []).append(point)
    fitted = {}
    for key, points in series.items():
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
        fitted[key] = covariance / sum((x - mean_x) ** 2 for x, _ in points)
    return fitted


def slopes_table(coords: Sequence[Coord]) -> str:
    """The slopes as a Markdown table: a row per layer, a column per parametrization and step."""
    fitted = slopes(coords)
    runs = sorted({(p, s) for p, _, s in fitted}, key=lambda k: (k[0] != "sp", k[1]))
    layers = list(dict.fromkeys(c.layer for c in coords))
    header = " | ".join(f"{p} step {s}" for p, s in runs)
    rows = [f"| layer | {header} |", "|---" * (len(runs) + 1) + "|"]
    for layer in layers:
        cells = " | ".join(f"{fitted[(p, layer, s)]:+.2f}" for p, s in runs)
        rows.append(f"| {layer} | {cells} |")
    return "\n".join(rows)
