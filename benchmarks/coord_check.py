"""µP's coordinate check: the RMS of every layer's output against width, over the first steps of
training, under the standard parametrization and under µP (model.parametrization=mup), drawn
as microsoft/mup draws it, and the log-log slopes printed as a table.

    python benchmarks/coord_check.py [--out coord_check.png] [--steps 4] [--lr 3e-3] [--seed 0]

`xfmr.training.coord_check` does the work (CPU, seconds): a 2-layer decoder at widths 32 to
512 (µP's base: 32), one fixed batch of random tokens, AdamW. The figure has one panel per
layer, sp in the top row and µP below, one line per step (step 1: at initialisation); a flat
line is a layer whose coordinates keep their size as the model widens. Without matplotlib the
table is printed and no figure is drawn.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from common.cli import script_parser
from xfmr.training.coord_check import WIDTHS, Coord, coord_check, slopes_table


def arguments() -> argparse.Namespace:
    parser = script_parser(__doc__)
    parser.add_argument("--out", type=Path, default=Path("coord_check.png"), help="the figure")
    parser.add_argument("--steps", type=int, default=4, help="training steps recorded")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW's learning rate")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def draw(coords: list[Coord], out: Path) -> bool:
    """The figure: a row per parametrization, a panel per layer; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    layers = list(dict.fromkeys(c.layer for c in coords))
    runs = list(dict.fromkeys(c.parametrization for c in coords))
    steps = sorted({c.step for c in coords})
    figure, axes = plt.subplots(
        len(runs), len(layers), figsize=(2.6 * len(layers), 2.6 * len(runs)), squeeze=False
    )
    colours = plt.get_cmap("viridis")
    for row, run in enumerate(runs):
        for column, layer in enumerate(layers):
            axis = axes[row][column]
            for index, step in enumerate(steps):
                points = [
                    (c.width, c.rms)
                    for c in coords
                    if (c.parametrization, c.layer, c.step) == (run, layer, step)
                ]
                axis.plot(*zip(*points, strict=True), marker=".", label=f"step {step}",
                          color=colours(index / max(1, len(steps) - 1)))  # fmt: skip
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_title(f"{'µP' if run == 'mup' else 'SP'} {layer}", fontsize=9)
            if row == len(runs) - 1:
                axis.set_xlabel("width (d_model)")
            if column == 0:
                axis.set_ylabel("RMS of the output")
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    return True


def main() -> None:
    args = arguments()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    settings = dict(widths=WIDTHS, steps=args.steps, lr=args.lr, seed=args.seed)
    coords = coord_check("sp", **settings) + coord_check("mup", **settings)
    print("log2 RMS against log2 width, slope per layer and step (0: flat, 1: doubles with width)")
    print(slopes_table(coords))
    if draw(coords, args.out):
        print(f"figure: {args.out}")
    else:
        print("matplotlib is not installed: no figure drawn (pip install matplotlib)")


if __name__ == "__main__":
    main()
