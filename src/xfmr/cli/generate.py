"""`xfmr-generate`: text from a trained run, for one input or a file of them (one per line).

Arguments, the run directory and `generation.*` are checked before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, generation_settings, parse_args, progress
from xfmr.errors import UserError
from xfmr.run_dir.files import locate_run

PROG = "xfmr-generate"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="generate",
    summary="continue a prompt, translate, or fill [MASK]s with a trained run.",
    examples=(
        "xfmr-generate run_dir=RUN input='the quick brown'",
        "xfmr-generate run_dir=RUN input_file=sources.txt generation=beam generation.num_beams=4",
        "xfmr-generate run_dir=RUN input='a small cat' generation=sample generation.top_p=0.9",
        "xfmr-generate run_dir=RUN checkpoint=averaged input='ein kleiner hund .'",
        "xfmr-generate run_dir=RUN input='the [MASK] sat on the mat'     (an MLM encoder)",
    ),
    groups=("generation",),
    text_keys=("input",),
)


def read_inputs(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """(inputs, their names for messages): `input`, or each line of `input_file`."""
    if (cfg.input is None) == (cfg.input_file is None):
        raise UserError(
            "give exactly one of input=TEXT or input_file=FILE (one input per line)"
            + (" (both are set)" if cfg.input is not None else "")
        )
    if cfg.input is not None:
        return [str(cfg.input)], ["input"]
    path = Path(str(cfg.input_file)).expanduser()
    if not path.is_file():
        raise UserError(f"input_file={str(cfg.input_file)!r} does not exist")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UserError(f"input_file={str(path)!r} is not UTF-8 text ({e.reason})") from None
    if not lines:
        raise UserError(f"input_file={str(path)!r} is empty: give one input per line")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise UserError(f"input_file {path}:{number} is blank: give one input per line")
    return lines, [f"{path}:{number}" for number in range(1, len(lines) + 1)]


def print_outputs(outputs: list[str | list[str]]) -> None:
    """One line per input; with n_best > 1, numbered hypotheses and a blank line between inputs."""
    for index, hypotheses in enumerate(outputs):
        if isinstance(hypotheses, str):
            print(hypotheses)
            continue
        if index:
            print()
        for rank, text in enumerate(hypotheses, 1):
            print(f"{rank}. {text}")


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        locate_run(cfg.run_dir, cfg.checkpoint)
        generation_settings(cfg.generation)
        texts, names = read_inputs(cfg)
        from xfmr.api.runs import Run

        outputs = Run(cfg.run_dir).generate(
            texts,
            generation=cfg.generation,
            checkpoint=cfg.checkpoint,
            device=cfg.device,
            names=names,
            progress=progress,
        )
    except UserError as e:
        fail(PROG, str(e))
    print_outputs(outputs)


if __name__ == "__main__":
    main()
