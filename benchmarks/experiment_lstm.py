"""An LSTM against a Transformer decoder of the same size on tiny Shakespeare: what does the
Transformer buy at equal steps, and at equal training time?

    python benchmarks/experiment_lstm.py --data ../shared/data/tinyshakespeare/input.txt

Trains `experiment=nanogpt_shakespeare_char` (a 4-layer decoder, d 128, learned positions,
block 64, batch 12, char tokens) and the same experiment with `arch=rnn`: embedding -> 2-layer
LSTM -> tied projection, with `model.target_params` set to the decoder's parameters, so that xfmr
chooses the LSTM's width (within 2%). Data, optimizer, schedule, steps and seeds are the same. Compares the validation loss at equal steps (95% t intervals,
Welch's test against the decoder, `xfmr-compare --baseline arch=decoder`) and at equal training
time (each run's loss read off its history at the time every run reached), and draws both.
Writes docs/experiments/lstm.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from common.pages import (
    Page,
    arguments,
    column,
    compared_table,
    experiment_overrides,
    fresh_model,
    markdown_table,
    plot_axes,
    run_vocab_size,
    shown_block,
    trained,
)

ARCHS = ("decoder", "rnn")
NAMES = {"decoder": "Transformer decoder", "rnn": "LSTM"}
COLOURS = {"decoder": "C0", "rnn": "C1"}
LSTM_LAYERS = 2


def main() -> None:
    args = arguments("lstm", __doc__, steps=1000, seeds=3)
    print(f"lstm: {len(ARCHS)} architectures x {args.seeds} seeds x {args.steps} steps")
    # The decoder's first run gives the parameters the LSTM is sized to; then the two
    # alternate, so that a machine busier at one time than another slows both alike.
    first = trained(args.runs / "decoder-seed1", overrides(args, "decoder", 1), quick=args.quick)
    target = int(first.results["n_parameters"])
    runs = {("decoder", 1): first}
    for seed in range(1, args.seeds + 1):
        for arch in ARCHS:
            if (arch, seed) not in runs:
                given = overrides(args, arch, seed, target=target)
                runs[(arch, seed)] = trained(args.runs / f"{arch}-seed{seed}", given,
                                             quick=args.quick)  # fmt: skip
    by_arch = {arch: [run for (a, _), run in runs.items() if a == arch] for arch in ARCHS}
    matching = matched(first, by_arch["rnn"][0])
    page = Page(args, "lstm", "LSTM or Transformer, at the same size and time", QUESTION)
    models(page, matching, by_arch, refusal(overrides(args, "rnn", 1, target=target)))
    frame = equal_steps(page, list(runs.values()))
    timed = equal_time(page, by_arch)
    page.figure(_curves(by_arch, "step"), "by_step",
                "validation loss against step: mean over seeds, each seed faint")  # fmt: skip
    page.figure(_curves(by_arch, "time_s"), "by_time", "validation loss against seconds of "
                "training (validation excluded): mean over seeds, each seed faint")  # fmt: skip
    page.add(conclusions(frame, timed, matching, args.steps))
    page.write(list(runs.values()))


QUESTION = """\
What does a Transformer buy over an LSTM language model of the same size? The decoder of
`experiment=nanogpt_shakespeare_char` and an LSTM with as many parameters train on the same
characters with the same optimizer, schedule and steps; they are compared after the same number
of steps, and after the same seconds of training, since a step of one need not cost what a step
of the other does."""


UNDONE = ("pos=none", "model.bias=true")  # what the experiment sets that an RNN does not read


def overrides(args: Any, arch: str, seed: int, *, target: int = 0) -> list[str]:
    """A run of `arch` (an LSTM of `target` parameters, its width chosen by xfmr). The LSTM's
    changes to the experiment besides its size undo what an RNN does not read, which xfmr refuses set for one: `pos=none`, as an
    RNN orders tokens by its recurrence, and nanoGPT's `model.bias=false` back to the default."""
    common = ["experiment=nanogpt_shakespeare_char", f"data.path={args.data}", f"seed={seed}",
              f"trainer.max_steps={args.steps}", "data.val_batches=50",
              f"trainer.val_check_interval={max(args.steps // 20, 1)}"]  # fmt: skip
    if arch == "decoder":
        return [*common, "arch=decoder"]
    return [*common, "arch=rnn", *UNDONE, "model.rnn_cell=lstm",
            f"model.n_layers={LSTM_LAYERS}", f"model.target_params={target}"]  # fmt: skip


@dataclass(frozen=True)
class Matching:
    """The LSTM's width xfmr chose, and the two models' parameter counts at the decoder's
    vocabulary."""

    width: int
    vocab_size: int
    decoder: int
    lstm: int

    @property
    def gap(self) -> float:
        return self.lstm / self.decoder - 1

    def line(self) -> str:
        """What the LSTM's run said it chose, as xfmr says it."""
        return (f"model.target_params={self.decoder}: model.d_model={self.width} gives "
                f"{self.lstm:,} parameters ({self.gap:+.2%})")  # fmt: skip


def matched(decoder_run: Any, lstm_run: Any) -> Matching:
    """The width the LSTM's run chose for the decoder's parameters, both models counted here
    by building them at the decoder run's vocabulary; each count must agree with what its run
    recorded, so the two are counted alike."""
    vocab_size = run_vocab_size(decoder_run)
    counts = [_count(fresh_model(run, vocab_size)) for run in (decoder_run, lstm_run)]
    for run, counted in zip((decoder_run, lstm_run), counts, strict=True):
        recorded = run.results.get("n_parameters")
        if counted != recorded:
            raise SystemExit(
                f"{run.path.name} counts {counted} parameters here, its run {recorded}"
            )
    found = Matching(int(lstm_run.config.model.d_model), vocab_size, *counts)
    print(f"  {found.line()}")
    return found


def _count(model: Any) -> int:
    """The model's parameters, each tied tensor once (as runs count them)."""
    return sum(p.numel() for p in model.parameters())


def refusal(lstm_overrides: list[str]) -> str:
    """What composing the experiment with `arch=rnn` alone says (empty if it is accepted)."""
    import xfmr
    from xfmr.errors import UserError

    try:
        alone = [o for o in lstm_overrides if o not in UNDONE]
        xfmr.compose(*alone, "hydra.run.dir=unused")
    except UserError as e:
        return str(e)
    return ""


def models(page: Page, matching: Matching, by_arch: dict[str, list], refused: str) -> None:
    """The two models: their parameters and every setting in which their runs differ."""
    decoder, lstm_run = by_arch["decoder"][0], by_arch["rnn"][0]
    counted = [
        ["Transformer decoder", decoder.config.model.n_layers, decoder.config.model.d_model,
         matching.decoder, decoder.results.get("n_parameters"), "-"],
        ["LSTM", lstm_run.config.model.n_layers, matching.width, matching.lstm,
         lstm_run.results.get("n_parameters"), f"{matching.gap:+.2%}"],
    ]  # fmt: skip
    header = ["model", "layers", "width", "parameters (counted)", "parameters (results.json)",
              "vs decoder"]  # fmt: skip
    commands = [f"xfmr-train {' '.join(experiment_overrides(by_arch[a][0]))}" for a in ARCHS]
    page.add(
        "## The two models",
        "The LSTM's width is xfmr's choice: its run sets `model.target_params` to the "
        "decoder's parameters, and xfmr builds the LSTM at the run's vocabulary of "
        f"{matching.vocab_size} characters at the width whose parameter count is nearest "
        "(tied embeddings counted once; within 2%, or it refuses), and says so:"
        f"\n\n{shown_block(matching.line())}\n\n"
        "Both are counted again here by building them; each run's results.json records its "
        "own count.",
        markdown_table(header, counted),
        "The commands, less where the runs go:\n\n" + shown_block("\n".join(commands), "console"),
        "Every setting of the two runs' resolved configs that differs (seed and paths aside); "
        "everything else, data, tokenizer, optimizer, schedule, steps and validation, is the "
        "same. The decoder alone reads `model.bias`, `placement`, `activation`, `n_heads` and "
        "`d_ff`; torch's LSTM keeps its gate biases.",
        markdown_table(["setting", "decoder", "LSTM"], _differences(decoder, lstm_run)),
    )
    if refused:
        page.add(
            "`arch=rnn` alone on top of the experiment is refused, in xfmr's words (the first "
            f"refusal), hence {' and '.join(f'`{o}`' for o in UNDONE)}:"
            f"\n\n{shown_block(refused)}"
        )


def _differences(first: Any, second: Any) -> list[list[str]]:
    """The config keys whose values differ between two runs, less the seed and where each run
    writes."""

    def flat(config: Any, prefix: str = "") -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in config.items():
            if isinstance(value, dict):
                found.update(flat(value, f"{prefix}{key}."))
            else:
                found[f"{prefix}{key}"] = value
        return found

    a, b = (flat(run.config.to_dict()) for run in (first, second))
    own = (str(first.path), str(second.path))

    def shown(key: str) -> bool:
        values = (str(a.get(key)), str(b.get(key)))
        return key != "seed" and not any(v.startswith(d) for v in values for d in own)

    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, "-") != b.get(k, "-") and shown(k))
    return [[k, str(a.get(k, "-")), str(b.get(k, "-"))] for k in keys]


def equal_steps(page: Page, runs: list[Any]) -> Any:
    """The final validation loss per architecture, with intervals and Welch's test."""
    import xfmr

    frame = xfmr.compare(runs, metric="val/loss", group_by="arch", baseline="arch=decoder")
    config = runs[0].config
    page.add(
        "## At equal steps",
        f"Final validation loss of each run (validated every {config.trainer.val_check_interval} "
        f"steps, on {config.data.val_batches} batches of windows spread evenly over the "
        "validation split, the same for every run), per "
        "architecture: mean, 95% t interval over seeds, and the LSTM's difference to the "
        "decoder with its interval and p-value (the paired t-test over the seeds both ran, "
        "Welch's where they do not pair) "
        "(`xfmr-compare RUNS --group-by arch --baseline arch=decoder`).",
        compared_table(frame, ["arch"]),
    )
    return frame


@dataclass(frozen=True)
class Timed:
    """Each architecture's completed runs read at `seconds` of training, one value per run: its
    validation loss there (NaN before its first validation), the step it had reached, its
    whole training time and its ms per step."""

    seconds: float
    losses: dict[str, list[float]]
    steps: dict[str, list[float]]
    totals: dict[str, list[float]]
    ms_per_step: dict[str, list[float]]

    def difference(self) -> Any:
        """The LSTM's loss at T minus the decoder's, by Welch's test; None below two a side."""
        from xfmr.runs.compare.stats import welch

        return welch(*(_kept(self.losses[arch]) for arch in ("rnn", "decoder")))


def timed_runs(by_arch: dict[str, list]) -> Timed:
    """The completed runs read at T, the shortest run's training time (so none is read past
    its end). Steps are read with (0 s, step 0) as a first point, which time_s counts from."""
    done = {arch: [r for r in runs if r.status == "completed"] for arch, runs in by_arch.items()}
    histories = {arch: [r.history for r in runs] for arch, runs in done.items()}
    totals = {arch: [float(h["time_s"].iloc[-1]) for h in hs] for arch, hs in histories.items()}
    seconds = min(min(t) for t in totals.values())

    def read(history: Any) -> tuple[float, float]:
        loss = _at(seconds, history["time_s"], history["val/loss"])
        return loss, _at(seconds, [0, *history["time_s"]], [0, *history.index])

    found = {arch: [read(h) for h in hs] for arch, hs in histories.items()}
    return Timed(
        seconds,
        losses={arch: [loss for loss, _ in pairs] for arch, pairs in found.items()},
        steps={arch: [step for _, step in pairs] for arch, pairs in found.items()},
        totals=totals,
        ms_per_step={arch: [_ms_per_step(run) for run in runs] for arch, runs in done.items()},
    )


def _ms_per_step(run: Any) -> float:
    """The run's median step (results.json), NaN if it has none."""
    return run.results.get("ms_per_step") or math.nan


TIME_HEADER = ("arch", "n", "training s (all steps)", "ms/step", "step at T", "val/loss at T "
               "(95% t interval)", "Δ vs decoder (95% Welch interval)", "p", "note")  # fmt: skip


def equal_time(page: Page, by_arch: dict[str, list]) -> Timed:
    """Each run's validation loss at the training time every run reached."""
    timed = timed_runs(by_arch)
    page.add(
        "## At equal training time",
        f"T = {timed.seconds:.1f} s, the shortest run's training time (the `time_s` of its last "
        "validation: seconds spent training, validation excluded), so that no run is read past "
        "its end. Each run's validation loss at T is interpolated linearly between its "
        "validations (none before its first), as is the step it had reached; the loss's mean "
        "and 95% t interval over seeds, and Welch's test of the LSTM against the decoder. The "
        "other columns are means over seeds; ms/step is each run's median step.",
        markdown_table(TIME_HEADER, [_time_row(timed, arch) for arch in ARCHS]),
    )
    return timed


def _time_row(timed: Timed, arch: str) -> list[Any]:
    losses = timed.losses[arch]
    row = [arch, len(losses), f"{_mean(timed.totals[arch]):.1f}",
           f"{_mean(timed.ms_per_step[arch]):.1f}", f"{_mean(timed.steps[arch]):.0f}",
           _with_interval(losses)]  # fmt: skip
    difference = timed.difference() if arch == "rnn" else None
    if difference is None:
        row += ["-", "-"]
    else:
        row += [f"{difference.delta:+.3f} [{difference.low:.3f}, {difference.high:.3f}]",
                f"{difference.p_value:.3g}"]  # fmt: skip
    unread = len(losses) - len(_kept(losses))
    return [*row, f"{unread} of {len(losses)} not validated by T" if unread else ""]


def _at(seconds: float, times: Any, values: Any) -> float:
    """`values` at `seconds`, linear between the given times; NaN before the first."""
    import numpy as np

    return float(np.interp(seconds, np.asarray(times, float), np.asarray(values, float),
                           left=np.nan))  # fmt: skip


def _with_interval(values: list[float]) -> str:
    from xfmr.runs.compare.stats import mean_interval

    kept = _kept(values)
    if not kept:
        return "-"
    interval = mean_interval(kept)
    shown = f"{_mean(kept):.3f}"
    return f"{shown} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else shown


def _curves(by_arch: dict[str, list], x: str) -> Any:
    """Validation loss against `x` (step or time_s) per architecture: each seed faint, and the
    mean over seeds at each validation."""
    figure, axes = plot_axes()
    for arch, runs in by_arch.items():
        histories = [r.history.reset_index() for r in runs if len(r.history)]
        for history in histories:
            axes.plot(history[x], history["val/loss"], color=COLOURS[arch], alpha=0.3, lw=0.8)
        if histories:  # the mean at each validation, over the seeds that reached it
            length = min(len(h) for h in histories)
            mean = sum(h.iloc[:length][[x, "val/loss"]] for h in histories) / len(histories)
            axes.plot(mean[x], mean["val/loss"], color=COLOURS[arch], lw=1.8, label=NAMES[arch])
    label = "step" if x == "step" else "seconds of training (validation excluded)"
    axes.set(xlabel=label, ylabel="validation loss (nats)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def conclusions(frame: Any, timed: Timed, matching: Matching, steps: int) -> str:
    """What the numbers say, written from them (so a rerun that finds otherwise says so)."""
    records = {record["arch"]: record for record in frame.to_dict("records")}
    final = column(frame, "final", "mean")
    speed = {arch: _mean(timed.ms_per_step[arch]) for arch in ARCHS}
    reached = {arch: _mean(timed.steps[arch]) for arch in ARCHS}
    at_steps = _versus(
        {arch: records[arch][final] for arch in ARCHS}, _significance(records["rnn"])
    )
    lines = [
        "## What it shows",
        f"At the same size ({matching.decoder} parameters for the decoder, {matching.lstm} for "
        f"the LSTM, {matching.gap:+.1%}) and after the same {steps} steps, {at_steps}.",
        f"A step costs the LSTM {speed['rnn']:.1f} ms and the decoder {speed['decoder']:.1f} "
        f"ms ({speed['rnn'] / speed['decoder']:.2f}x), so in T = {timed.seconds:.1f} s of "
        f"training the LSTM reached step {reached['rnn']:.0f} and the decoder step "
        f"{reached['decoder']:.0f}. " + _at_equal_time(timed),
    ]
    return "\n\n".join(lines)


def _at_equal_time(timed: Timed) -> str:
    """The equal-time comparison in a sentence, or why there is none."""
    missing = [NAMES[arch] for arch in ARCHS if not _kept(timed.losses[arch])]
    if missing:
        return (f"No loss is compared at equal time: by T the {' and the '.join(missing)} had "
                "not yet validated.")  # fmt: skip
    difference = timed.difference()
    if difference is None or difference.p_value != difference.p_value:
        test = "too few seeds to test"
    else:
        test = f"Welch p = {difference.p_value:.3g}, " + _verdict(difference.p_value)
    sentence = "At equal time, " + _versus({a: _mean(timed.losses[a]) for a in ARCHS}, test) + "."
    partial = [f"{len(_kept(timed.losses[a]))} of {len(timed.losses[a])} {NAMES[a]} runs"
               for a in ARCHS if len(_kept(timed.losses[a])) < len(timed.losses[a])]  # fmt: skip
    if partial:
        sentence += f" Read from {' and '.join(partial)}: the others had not validated by T."
    return sentence


def _versus(losses: dict[str, float], test: str) -> str:
    gap = losses["rnn"] - losses["decoder"]
    lower = "decoder" if gap > 0 else "LSTM"
    return (f"the decoder's validation loss is {losses['decoder']:.3f} and the LSTM's "
            f"{losses['rnn']:.3f}: the {lower} is lower by {abs(gap):.3f} nats ({test})")  # fmt: skip


def _significance(record: dict[str, Any]) -> str:
    p = record.get("p (Holm)")
    if p is None or p != p:
        return "too few seeds to test"
    return f"Welch p = {p:.3g}, " + _verdict(p)


def _verdict(p: float) -> str:
    from xfmr.runs.compare.stats import ALPHA

    return "significant" if p < ALPHA else f"not significant at {ALPHA:.2g}"


def _kept(values: list[float]) -> list[float]:
    return [v for v in values if v == v]  # NaN != NaN


def _mean(values: list[float]) -> float:
    kept = _kept(values)
    return sum(kept) / len(kept) if kept else math.nan


if __name__ == "__main__":
    main()
