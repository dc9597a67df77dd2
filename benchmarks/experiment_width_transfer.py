"""Does the best learning rate hold across widths under µP, and move under SP? A learning-rate
sweep at four widths on tiny Shakespeare, in both parametrizations.

    python benchmarks/experiment_width_transfer.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (AdamW, warm-up and cosine decay, char tokens,
block 64) at 2 layers and 4 heads, d_model 32, 64, 128 and 256 (the head dim grows with the
width), at seven learning rates a factor of two apart, under `model.parametrization=sp` and
`model.parametrization=mup` (`model.mup_base_width=32`, the narrowest width), --seeds seeds
each, --jobs runs at a time on one thread each. Per parametrization and width it reports the
best learning rate by the mean final validation loss over seeds, with a bootstrap over seeds of
where that best falls; how far the best moves from the narrowest width to the others, in factors
of two; and, at the widest width, the loss of the narrowest width's best learning rate against
the loss of the best found there, paired by seed. Writes docs/experiments/width-transfer.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from common.pages import Page, arguments, trained
from width_transfer import (
    BATCH,
    BLOCK,
    HEADS,
    LAYERS,
    LR_EXPONENTS,
    PARAMETRIZATIONS,
    QUICK_LR_EXPONENTS,
    QUICK_WIDTHS,
    TESTS,
    VAL_BATCHES,
    WIDTHS,
)


def main() -> None:
    args = arguments("width_transfer", __doc__, steps=200, seeds=3, more=_more)
    widths = QUICK_WIDTHS if args.quick else WIDTHS
    exponents = QUICK_LR_EXPONENTS if args.quick else LR_EXPONENTS
    settings = [(par, width, exponent) for par in PARAMETRIZATIONS for width in widths
                for exponent in exponents]  # fmt: skip
    # Seed by seed, so that a study stopped early has whole seeds; the widest first within a
    # seed, so that parallel jobs finish together.
    order = [(par, width, exponent, seed) for seed in range(1, args.seeds + 1)
             for par, width, exponent in sorted(settings, key=lambda s: -s[1])]  # fmt: skip
    print(f"width transfer: {len(PARAMETRIZATIONS)} parametrizations x {len(widths)} widths x "
          f"{len(exponents)} learning rates x {args.seeds} seeds = {len(order)} runs")  # fmt: skip
    planned = {key: (run_dir(args, *key), overrides(args, *key, base=widths[0])) for key in order}
    if args.jobs > 1 and not args.only_finished:
        _in_parallel(list(planned.values()), args)
    runs = {key: _found(path) if args.only_finished else trained(path, given, quick=args.quick)
            for key, (path, given) in planned.items()}  # fmt: skip
    write(args, runs, widths, exponents)


def write(args: Any, runs: dict, widths: tuple[int, ...], exponents: tuple[int, ...]) -> None:
    """The page, from the runs (None: a run not found finished, with --only-finished)."""
    from width_transfer.sweep import Sweep
    from width_transfer.words import conclusions, scope, sections, tested

    sweep = Sweep.of(runs, widths, exponents)
    tests = tested(sweep)
    page = Page(args, "width-transfer", "Learning rates across widths: SP and µP", QUESTION,
                tests=TESTS)  # fmt: skip
    if sweep.missing:
        page.add(_partial(sweep, len(runs)))
    page.add("## Scope", scope(args, runs, sweep, tests))
    sections(page, sweep, tests)
    page.add(conclusions(sweep, tests, args.steps))
    page.write([run for run in runs.values() if run is not None])


def _partial(sweep: Any, planned: int) -> str:
    seeds = sorted({seed for _, seed in sweep.missing})
    return (
        f"> Partial: {len(sweep.missing)} of the {planned} planned runs had not finished when "
        f"this page was written (seeds {', '.join(map(str, seeds))} incomplete); every figure "
        f"below uses only the seeds that every setting has ({', '.join(map(str, sweep.seeds))})."
    )


def _found(path: Path) -> Any:
    """The run in `path` if one finished there (completed or failed), else None."""
    import xfmr

    if not (path / "results.json").is_file():
        return None
    run = xfmr.open_run(path)
    return run if run.status in ("completed", "failed") else None


def _more(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="runs trained at a time, each in a process of its own on one thread (default: 1)",
    )  # fmt: skip
    parser.add_argument(
        "--only-finished", action="store_true",
        help="train nothing: write the page from the runs found finished, marked partial",
    )  # fmt: skip


QUESTION = """\
Is the learning rate that is best for a narrow model still the best for a wide one? Under the
standard parametrization (SP) the best Adam learning rate is expected to fall as the model
widens; under the maximal update parametrization (µP; Yang et al. 2022, "Tensor Programs V"),
which xfmr builds with `model.parametrization=mup`, it is expected to stay put, so that a sweep
on a narrow proxy tunes the wide model. Four widths of a 2-layer character GPT, a sweep of seven
learning rates at each, under each parametrization."""


def run_dir(args: Any, par: str, width: int, exponent: int, seed: int) -> Path:
    return args.runs / f"{par}-d{width}-lr2e{exponent}-seed{seed}"


def overrides(args: Any, par: str, width: int, exponent: int, seed: int, *, base: int) -> list[str]:
    """One run's overrides: the recipe at LAYERS layers of HEADS heads and `width`, the learning
    rate 2^exponent, validated once, at the end, on VAL_BATCHES fixed batches."""
    return ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}",
            f"model.n_layers={LAYERS}", f"model.n_heads={HEADS}", f"model.d_model={width}",
            f"model.parametrization={par}", f"model.mup_base_width={base}",
            f"optim.lr={2.0 ** exponent}", f"seed={seed}", f"trainer.max_steps={args.steps}",
            f"trainer.val_check_interval={args.steps}", f"data.val_batches={VAL_BATCHES}",
            f"data.batch_size={BATCH}", f"data.block_size={BLOCK}",
            # The page reads no MFU: a fixed peak spares each run measuring one (~1 s).
            "throughput.peak_tflops=1"]  # fmt: skip


def _in_parallel(planned: list[tuple[Path, list[str]]], args: Any) -> None:
    """Train the planned runs --jobs at a time, each job a process on one thread (the runs are
    read back in order afterwards, by `trained`, which then finds them finished)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_one_thread) as pool:
        for done in [pool.submit(_train, path, given, args.quick) for path, given in planned]:
            done.result()


def _one_thread() -> None:
    import torch

    from common.pages import _quiet

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    _quiet()


def _train(path: Path, given: list[str], quick: bool) -> None:
    trained(path, given, quick=quick)


if __name__ == "__main__":
    main()
