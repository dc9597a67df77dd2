"""`xfmr-attention`: one PNG heatmap per attention layer and head of a trained run for one
input (an encoder-decoder: also decoder self- and cross-attention over its greedy output).

Arguments, the run directory and `generation.*` are checked before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, generation_settings, parse_args
from xfmr.errors import UserError
from xfmr.run_dir.files import locate_run

PROG = "xfmr-attention"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="attention",
    summary="draw a trained run's attention for one input, one PNG per layer and head.",
    examples=(
        "xfmr-attention run_dir=RUN input='the quick brown fox'",
        "xfmr-attention run_dir=RUN input='ein hund läuft .' out=maps/ generation.max_new_tokens=20",
    ),
    groups=("generation",),
    text_keys=("input",),
)


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        files = locate_run(cfg.run_dir, cfg.checkpoint)
        generation_settings(cfg.generation)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / "attention"
        from xfmr.api.runs import Run

        maps = Run(files.run_dir).attention(
            str(cfg.input or ""),
            checkpoint=files.checkpoint,
            device=cfg.device,
            out=out,
            generation=cfg.generation,
        )
    except UserError as e:
        fail(PROG, str(e))
    layers = len({(m.layer, m.kind) for m in maps})
    print(f"wrote {len(maps)} heatmaps ({layers} attention calls x heads) to {out}")


if __name__ == "__main__":
    main()
