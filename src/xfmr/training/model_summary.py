"""Lightning's model summary with the training FLOPs xfmr counts in place of the FLOPs Lightning
counts: Lightning runs `example_input_array` through the model under a FlopCounterMode, and xfmr's
modules set none (their batches are dicts the objective builds), so its column reads 0 for every
layer and its total "0".

A callback of xfmr's own over Lightning's public summary (`summarize` and its properties), drawn
with rich as Lightning's RichModelSummary draws it; the Trainer is told to add none of its own
(`SUMMARY_FROM_TRAINER`)."""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
from lightning.pytorch.utilities.model_summary import (
    DeepSpeedSummary,
    get_formatted_model_size,
    get_human_readable_count,
    summarize,
)
from lightning.pytorch.utilities.model_summary import ModelSummary as Summary
from lightning.pytorch.utilities.model_summary.model_summary import (
    LEFTOVER_PARAMS_NAME,
    NOT_APPLICABLE,
)
from torch import nn
from torch.nn.parameter import UninitializedParameter

from xfmr.training.throughput import TrainingFlops

# Lightning's summary sizes parameters by a table of precisions without the *-mixed ones, for
# which it warns and takes 32 bits; `parameter_megabytes` sizes them as they are held instead.
PRECISION_WARNING = r"Precision .* is not supported by the model summary"
# The examples whose every input holds exactly data.block_size tokens (xfmr.kinds.TEXT, read
# by a decoder or encoder): only there is T known before the first batch.
FIXED_LENGTH_KIND = "text"
SI_PREFIXES = ("", "K", "M", "G", "T", "P", "E")
# The Trainer adds a summary of its own unless told not to: this one stands in for it, and
# reads `trainer.enable_model_summary` itself (`enabled`).
SUMMARY_FROM_TRAINER = {"enable_model_summary": False}


class ModelSummary(L.Callback):
    """Lightning's model summary, drawn with rich, with no FLOPs column or total, and one line
    of training FLOPs per token from `TrainingFlops` (nothing for an architecture without an
    estimate, such as an RNN).

    Args:
        max_depth: the depth of nested layers shown, as Lightning's; 0 shows nothing.
        enabled: the run's `trainer.enable_model_summary`.
        header_style: the table's header style, as Lightning's RichModelSummary's.
    """

    def __init__(
        self, max_depth: int = 1, *, enabled: bool = True, header_style: str = "bold magenta"
    ) -> None:
        self.max_depth = max_depth if enabled else 0
        self.header_style = header_style

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.max_depth:
            return
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PRECISION_WARNING, category=UserWarning)
            summary = summarize(pl_module, max_depth=self.max_depth)
        columns = summary_columns(summary, pl_module)
        if not trainer.is_global_zero:
            return
        totals = {
            "total_parameters": summary.total_parameters,
            "trainable_parameters": summary.trainable_parameters,
            "model_size": parameter_megabytes(pl_module, summary.total_parameters),
            "total_training_modes": summary.total_training_modes,
        }
        flops = TrainingFlops.of(pl_module.model) if hasattr(pl_module, "model") else None
        line = None if flops is None else training_flops_line(flops, trainer.datamodule)
        _show_rich(columns, totals, line, header_style=self.header_style)


def summary_columns(summary: Summary, module: L.LightningModule) -> list[tuple[str, list[str]]]:
    """Lightning's table of layers, (heading, cells) per column, but for its FLOPs column: as
    Lightning 2.6's summaries make it for their own printing, from their public properties."""
    count = get_human_readable_count
    columns = [
        (" ", [str(i) for i in range(len(summary.layer_names))]),
        ("Name", list(summary.layer_names)),
        ("Type", list(summary.layer_types)),
        ("Params", [count(n) for n in summary.param_nums]),
    ]
    if isinstance(summary, DeepSpeedSummary):
        columns.append(("Params per Device", [count(n) for n in summary.parameters_per_layer]))
    columns.append(("Mode", ["train" if mode else "eval" for mode in summary.training_modes]))
    if module.example_input_array is not None:
        columns.append(("In sizes", [str(size) for size in summary.in_sizes]))
        columns.append(("Out sizes", [str(size) for size in summary.out_sizes]))
    leftover = summary.total_parameters - summary.total_layer_params
    if leftover > 0:  # parameters of the module itself, in no layer shown: one more row
        last_row = {" ": " ", "Name": LEFTOVER_PARAMS_NAME, "Params": count(leftover)}
        for heading, cells in columns:
            cells.append(last_row.get(heading, NOT_APPLICABLE))
    return columns


def parameter_megabytes(module: nn.Module, total_parameters: int) -> float:
    """The size of `total_parameters` held as `module`'s parameters are: float32 under bf16-mixed
    and 16-mixed, where autocast casts copies for the matmuls and the weights stay float32."""
    held = [p for p in module.parameters() if not isinstance(p, UninitializedParameter)]
    count = sum(p.numel() for p in held)
    if count:
        per_parameter = sum(p.numel() * p.element_size() for p in held) / count
    else:  # sharded away (DeepSpeed stage 3) or none at all
        per_parameter = held[0].element_size() if held else 4
    return total_parameters * per_parameter * 1e-6


def training_flops_line(flops: TrainingFlops, datamodule: Any = None) -> str:
    """One line of training FLOPs per token: at the data's block length where every input has
    it, else the length-free term and the attention term's factor, the batch's length being
    known only at the first batch."""
    block_size = getattr(datamodule, "block_size", None)
    fixed = getattr(datamodule, "gives", None) == FIXED_LENGTH_KIND and block_size
    if fixed and flops.arch != "encoder_decoder":
        per_token = flops.per_token(block_size)
        line = (
            f"Training FLOPs: {format_flops(per_token)} per token "
            f"(6N + 12*L*d*T at T={block_size}, data.block_size)"
        )
        batch_size = getattr(datamodule, "batch_size", None)
        if batch_size:
            line += (
                f", {format_flops(per_token * batch_size * block_size)} per batch of "
                f"{batch_size} x {block_size} tokens"
            )
        return line
    attention = 12 * flops.d_model
    if flops.arch == "encoder_decoder":
        return (
            f"Training FLOPs: 6N = {format_flops(6 * flops.source_weights)} per source token "
            f"and {format_flops(6 * flops.weights)} per target token, plus attention's "
            f"12*d = {attention} per query per key per layer (lengths known at the first batch)"
        )
    return (
        f"Training FLOPs: 6N = {format_flops(6 * flops.weights)} per token plus 12*L*d*T = "
        f"{attention * flops.n_layers}*T (T, the batch's length, known at the first batch)"
    )


def format_flops(flops: float) -> str:
    """`flops` in SI prefixes to 3 significant digits: 173184 -> "173 KFLOP"."""
    exponent = 0
    while abs(flops) >= 1000 and exponent < len(SI_PREFIXES) - 1:
        flops /= 1000
        exponent += 1
    return f"{flops:.3g} {SI_PREFIXES[exponent]}FLOP"


# Lightning's RichModelSummary columns, but for its FLOPs column.
RICH_COLUMNS: dict[str, dict[str, Any]] = {
    " ": {"style": "dim"},
    "Name": {"justify": "left", "no_wrap": True},
    "Params": {"justify": "right"},
    "Params per Device": {"justify": "right"},
    "In sizes": {"justify": "right", "style": "white"},
    "Out sizes": {"justify": "right", "style": "white"},
}


def _show_rich(
    columns: list[tuple[str, list[str]]],
    totals: dict[str, Any],
    flops_line: str | None,
    *,
    header_style: str,
) -> None:
    from rich import get_console
    from rich.table import Table

    console = get_console()
    table = Table(header_style=header_style)
    for name, _values in columns:
        table.add_column(name, **RICH_COLUMNS.get(name, {}))
    for row in zip(*(values for _name, values in columns), strict=True):
        table.add_row(*row)
    console.print(table)

    total, trainable = totals["total_parameters"], totals["trainable_parameters"]
    modes = totals["total_training_modes"]
    grid = Table.grid(expand=True)
    grid.add_column()
    for label, value in (
        ("Trainable params", get_human_readable_count(int(trainable))),
        ("Non-trainable params", get_human_readable_count(int(total - trainable))),
        ("Total params", get_human_readable_count(int(total))),
        ("Total estimated model params size (MB)", get_formatted_model_size(totals["model_size"])),
        ("Modules in train mode", modes["train"]),
        ("Modules in eval mode", modes["eval"]),
    ):
        grid.add_row(f"[bold]{label}[/]: {value}")
    console.print(grid)
    if flops_line:
        label, _, rest = flops_line.partition(": ")
        console.print(f"[bold]{label}[/]: {rest}", soft_wrap=True, highlight=False)
