"""Loss by position: the mean loss at each position t of the evaluated windows, a causal LM's
loss given t + 1 tokens of context, written as a CSV and drawn as a PNG with the length the
run trained on marked; past that length the positions are extrapolated (Press et al. 2022,
fig. 1, draws the same curve to compare schemes). No torch here; matplotlib only for the PNG."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from xfmr.files import atomic_write_text


def by_position_paths(report: Path) -> tuple[Path, Path]:
    """Beside the report: eval.json -> eval.by_position.csv and eval.by_position.png."""
    return (
        report.with_name(f"{report.stem}.by_position.csv"),
        report.with_name(f"{report.stem}.by_position.png"),
    )


def split_at(losses: list[float | None], targets: list[int], trained: int) -> dict:
    """The target-weighted mean loss of the positions before `trained` and of those from it on
    (None where there are none)."""

    def mean(span: range) -> float | None:
        counted = sum(targets[t] for t in span)
        total = sum(losses[t] * targets[t] for t in span if targets[t])
        return total / counted if counted else None

    length = len(losses)
    return {
        "loss_within_trained": mean(range(min(trained, length))),
        "loss_past_trained": mean(range(min(trained, length), length)),
    }


def write_by_position(
    by_position: dict[str, list], *, trained: int, csv_path: Path, png_path: Path, title: str
) -> dict:
    """Write the CSV (position, loss, targets) and the PNG; returns what eval.json records."""
    losses, targets = by_position["loss"], by_position["targets"]
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(["position", "loss", "targets"])
    for position, (loss, count) in enumerate(zip(losses, targets, strict=True)):
        writer.writerow([position, "" if loss is None else repr(loss), count])
    atomic_write_text(csv_path, table.getvalue())
    save_plot(losses, trained=trained, path=png_path, title=title)
    return {
        "block_size": len(losses),
        "trained_block_size": trained,
        **split_at(losses, targets, trained),
        "csv": str(csv_path),
        "plot": str(png_path),
    }


def save_plot(losses: list[float | None], *, trained: int, path: Path, title: str) -> None:
    """Loss against position, a dashed line where the trained length ends."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(figure)  # no pyplot: nothing global, no display needed
    axes = figure.add_subplot()
    shown = [(t, loss) for t, loss in enumerate(losses) if loss is not None]
    axes.plot([t for t, _ in shown], [loss for _, loss in shown], marker=".", linewidth=1.2)
    if trained < len(losses):
        axes.axvline(trained - 0.5, color="grey", linestyle="--", linewidth=1)
        label = f" trained length {trained}"
        at_top = axes.get_xaxis_transform()  # x in data, y in axes fractions
        axes.text(trained - 0.5, 0.98, label, transform=at_top, va="top", color="grey")
    axes.set(
        xlabel="position t in the window (t + 1 tokens of context)", ylabel="mean loss", title=title
    )
    axes.title.set_fontsize("medium")
    axes.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
