"""Packing (`data.packing=true`) before and after, on SST-2 and Multi30k: the share of padding
in a training epoch, and real tokens per second of training, unpacked and packed side by side.

    python benchmarks/packing.py --data-dir ../shared/data [--steps 50] [--warmup 10]
        [--rounds 1] [--threads 1] [--size small] [--out outputs/bench/packing]

--data-dir holds sst2/{train,dev}.tsv and multi30k/{train,val}.{de,en} (`xfmr-data get sst2`,
`xfmr-data get multi30k`). Two experiments as shipped: `experiment=bert_sst2` (classification,
batch 32) and `experiment=transformer_multi30k` (seq2seq, batch 64), at `size=` --size where
given (the experiments' own, small, otherwise).

1. Padding over one training epoch. The run's parts are built in this process as xfmr-train
   builds them (`plan_training`, `build_parts`: the tokenizer fitted on the training split and
   cached, the data encoded, the objective bound) with data.packing=false; every batch of the
   training loader's epoch (the same sampler, the experiment's batch size) is counted as
   collated, then as the objective's `pack` lays out that same batch. Padding share: positions
   whose mask is 0 over all positions of the side (a classifier's sentence; a translation's
   source, the encoder's, and target, the decoder's, apart). Rows: the batch's rows, on average.
2. Speed. Each experiment trains --steps optimizer steps with data.packing=false and =true,
   each run in a fresh xfmr-train process (OMP_NUM_THREADS and MKL_NUM_THREADS = --threads,
   data made in the training process: data.num_workers=auto is 0 on a CPU, so packing's own
   cost is inside the step), in the order false, true, then true, false in the next round
   (--rounds), so that drift on a shared machine reaches both alike. The callback `RealTokens`
   (loaded in xfmr-train's process from this script) records `time.perf_counter()` at the end
   of every step and the step's real tokens: the positions whose mask is 1, over every side
   (a translation's source and target). xfmr's own `train/tokens_per_s` counts every position
   of `input_ids`, padding included, and a translation's source only, so it would count fewer
   tokens for the same examples packed: it is not used here. Steps after --warmup are timed:
   ms/step is their total time over their number, tokens/s their real tokens over that time.
   Both settings train on the same examples (the same seed and sampler), so their real tokens
   agree; the table says so. Validation (one batch, after the last step) is outside the timing.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch

from common.cli import command_line, script_parser
from common.xfmr_runs import QUIET, child_env, run_timed, train_command, train_config


@dataclass(frozen=True)
class Experiment:
    """A shipped experiment that packs, and the mask of each of its sides."""

    name: str
    label: str
    sides: dict[str, str]  # side's name -> its mask key in a batch


EXPERIMENTS = (
    Experiment("bert_sst2", "SST-2", {"sentence": "attention_mask"}),
    Experiment(
        "transformer_multi30k",
        "Multi30k",
        {"source": "attention_mask", "target": "decoder_attention_mask"},
    ),
)


def experiment_overrides(experiment: Experiment, data_dir: Path, size: str | None) -> list[str]:
    return [
        f"experiment={experiment.name}",
        f"paths.data_dir={data_dir.resolve()}",
        *([f"size={size}"] if size else []),
    ]


# --------------------------------------------------------------------------- padding in an epoch


@dataclass
class Side:
    """One side's positions over an epoch: all of them and those that are padding."""

    positions: int = 0
    padding: int = 0

    def add(self, mask: Any) -> None:
        self.positions += int(mask.numel())
        self.padding += int((mask == 0).sum())

    @property
    def share(self) -> float:
        return self.padding / self.positions


@dataclass
class Layout:
    """An epoch's batches laid out one way (unpacked or packed): rows, and each side's count."""

    sides: dict[str, Side]
    rows: int = 0
    batches: int = 0
    examples: int = 0

    def add(self, batch: dict[str, Any], masks: dict[str, str], examples: int) -> None:
        self.batches += 1
        self.examples += examples
        self.rows += int(batch[next(iter(masks.values()))].size(0))
        for side, key in masks.items():
            self.sides[side].add(batch[key])


def epoch_layouts(
    experiment: Experiment, data_dir: Path, cache_dir: Path, size: str | None
) -> dict[str, Layout]:
    """Every batch of one training epoch, as collated and as packed (`objective.pack` on the
    same batch): {"unpacked": Layout, "packed": Layout}."""
    from xfmr.parts.build import build_parts
    from xfmr.training.run import plan_training

    with tempfile.TemporaryDirectory() as run_dir:  # the run's labels.json goes here
        config = train_config([
            *experiment_overrides(experiment, data_dir, size),
            "data.packing=false",
            "data.num_workers=0",
            f"paths.root_dir={run_dir}",
            f"paths.output_dir={run_dir}",
            f"paths.cache_dir={cache_dir}",
        ])  # fmt: skip
        L.seed_everything(config.seed, verbose=False)
        parts = build_parts(plan_training(config), data=config.data)
        layouts = {
            way: Layout({side: Side() for side in experiment.sides})
            for way in ("unpacked", "packed")
        }
        for window in parts.datamodule.train_dataloader():
            for batch in window:
                examples = int(batch[next(iter(experiment.sides.values()))].size(0))
                layouts["unpacked"].add(batch, experiment.sides, examples)
                layouts["packed"].add(parts.objective.pack(batch), experiment.sides, examples)
    return layouts


# --------------------------------------------------------------------------- speed


class RealTokens(L.Callback):
    """In xfmr-train's process (`+callbacks.real_tokens._target_=packing.RealTokens`):
    `time.perf_counter()` at the end of every training step, and the step's real tokens (mask
    1, every side in `masks`, all micro-batches), written to `path` as JSON when training ends.
    Reading a mask's sum waits for the device: a CPU's work is synchronous anyway."""

    def __init__(self, path: str, masks: list[str]) -> None:
        self.path, self.masks = Path(path), list(masks)
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.positions: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        self.times.append(time.perf_counter())
        keys = [key for key in self.masks if key in batch[0]]
        self.tokens.append(sum(int(b[key].sum()) for b in batch for key in keys))
        self.positions.append(sum(int(b[key].numel()) for b in batch for key in keys))

    def on_train_end(self, trainer, pl_module) -> None:  # noqa: ANN001
        record = {"times": self.times, "tokens": self.tokens, "positions": self.positions}
        self.path.write_text(json.dumps({**record, "threads": torch.get_num_threads()}))


@dataclass
class Speed:
    """One setting's timed steps over its runs."""

    seconds: list[float] = field(default_factory=list)  # each run's timed steps, in total
    steps: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # each run's real tokens in those steps
    threads: set[int] = field(default_factory=set)

    def add(self, record: dict[str, Any], warmup: int) -> None:
        times, tokens = record["times"], record["tokens"]
        self.seconds.append(times[-1] - times[warmup - 1])
        self.steps.append(len(times) - warmup)
        self.tokens.append(sum(tokens[warmup:]))
        self.threads.add(record["threads"])

    @property
    def ms_per_step(self) -> float:
        return 1000.0 * sum(self.seconds) / sum(self.steps)

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / sum(self.seconds)

    @property
    def spread(self) -> str:
        """Each run's tokens/s, where there were several."""
        each = [t / s for t, s in zip(self.tokens, self.seconds, strict=True)]
        return "" if len(each) < 2 else " (" + ", ".join(f"{v:,.0f}" for v in each) + ")"


def timed_run(experiment: Experiment, packing: bool, args: Any, name: str) -> dict[str, Any]:
    """xfmr-train for --steps steps in a process of its own; `RealTokens`'s record."""
    run_dir = args.out / "runs" / name
    record_file = args.out / "runs" / f"{name}.json"
    masks = ",".join(experiment.sides.values())
    overrides = [
        *experiment_overrides(experiment, args.data_dir, args.size),
        f"data.packing={str(packing).lower()}",
        f"trainer.max_steps={args.steps}",
        f"trainer.val_check_interval={args.steps}",
        "trainer.limit_val_batches=1",
        "trainer.num_sanity_val_steps=0",
        "trainer.enable_model_summary=false",
        "throughput.peak_tflops=1.0",  # no peak measured before the first step
        "callbacks.model_checkpoint=null",
        "logger=none",
        "+callbacks.real_tokens._target_=packing.RealTokens",
        f"+callbacks.real_tokens.path={record_file}",
        f"+callbacks.real_tokens.masks=[{masks}]",
        f"hydra.run.dir={run_dir}",
        *QUIET,
    ]
    threads = str(args.threads)
    env = child_env(
        args.out / "cache", callbacks=True, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads
    )
    run_timed(train_command(*overrides), env=env)
    return json.loads(record_file.read_text())


def speeds(experiment: Experiment, args: Any) -> dict[bool, Speed]:
    """{packing: Speed} over --rounds rounds, false then true, then true then false, ..."""
    found = {False: Speed(), True: Speed()}
    for round_ in range(args.rounds):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for packing in order:
            name = f"{experiment.name}-packing_{str(packing).lower()}-{round_}"
            found[packing].add(timed_run(experiment, packing, args, name), args.warmup)
    return found


# --------------------------------------------------------------------------- the table


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


HEAD = ("| data | measure | unpacked | packed |", "|---|---|--:|--:|")


def table_rows(
    experiment: Experiment, layouts: dict[str, Layout], speed: dict[bool, Speed]
) -> list[str]:
    """The experiment's rows of the markdown table: unpacked and packed side by side."""
    before, after = layouts["unpacked"], layouts["packed"]
    lines = []
    for side in experiment.sides:
        shares = before.sides[side].share, after.sides[side].share
        lines.append((f"padding share, {side}", *map(percent, shares)))
    rows_per_batch = (layout.rows / layout.batches for layout in (before, after))
    lines.append(("rows per batch", *(f"{rows:.1f}" for rows in rows_per_batch)))
    plain, packed = speed[False], speed[True]
    lines.append(("ms/step", f"{plain.ms_per_step:.1f}", f"{packed.ms_per_step:.1f}"))
    lines.append((
        "real tokens/s",
        f"{plain.tokens_per_s:,.0f}{plain.spread}",
        f"{packed.tokens_per_s:,.0f}{packed.spread}",
    ))  # fmt: skip
    lines.append(
        ("tokens/s, packed / unpacked", "", f"{packed.tokens_per_s / plain.tokens_per_s:.2f}x")
    )
    return [f"| {experiment.label} | {name} | {a} | {b} |" for name, a, b in lines]


def notes(experiment: Experiment, layouts: dict[str, Layout], speed: dict[bool, Speed]) -> str:
    """What the table stands on: the epoch's size, the timed steps, the check that both
    settings trained on the same real tokens."""
    epoch = layouts["unpacked"]
    plain, packed = speed[False], speed[True]
    same = plain.tokens == packed.tokens
    return (
        f"{experiment.label}: epoch of {epoch.batches} batches, {epoch.examples} examples; "
        f"{plain.steps[0]} timed steps a run, {len(plain.steps)} run(s) a setting; "
        f"real tokens in the timed steps {plain.tokens} unpacked, {packed.tokens} packed "
        f"(same: {same}); torch threads {sorted(plain.threads | packed.threads)}"
    )


def main() -> None:
    parser = script_parser(__doc__)
    parser.add_argument("--data-dir", type=Path, required=True, help="holds sst2/ and multi30k/")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps a timed run")
    parser.add_argument("--warmup", type=int, default=10, help="steps before the timing")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each run")
    parser.add_argument("--size", default=None, help="size= (default: the experiments' own)")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/packing"))
    args = parser.parse_args()
    if not 1 <= args.warmup < args.steps:
        parser.error(f"--warmup={args.warmup}: from 1 to --steps - 1 ({args.steps - 1})")
    args.out = args.out.resolve()
    torch.set_num_threads(args.threads)  # this process builds and packs the epoch's batches
    started = time.perf_counter()
    print(command_line(), "\n")
    rows, said = [], []
    for experiment in EXPERIMENTS:
        layouts = epoch_layouts(experiment, args.data_dir, args.out / "cache", args.size)
        speed = speeds(experiment, args)
        rows += table_rows(experiment, layouts, speed)
        said.append(notes(experiment, layouts, speed))
    print("\n".join([*HEAD, *rows]), "\n")
    print("\n".join(said), "\n")
    print(f"{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
