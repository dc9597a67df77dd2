"""`xfmr-export`: a run's model weights as a .safetensors file (with its tokenizer.json beside
it) for sharing, e.g. with Hugging Face users.

Arguments and the run directory are checked before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, parse_args
from xfmr.errors import UserError
from xfmr.run_dir.files import EXPORT_FILE, locate_run

PROG = "xfmr-export"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="export",
    summary="write a run's model weights as a .safetensors file, its tokenizer.json beside it.",
    examples=(
        "xfmr-export run_dir=RUN                     RUN/model.safetensors from the best checkpoint",
        "xfmr-export run_dir=RUN checkpoint=averaged out=share/model.safetensors",
        "xfmr-train init_from=RUN/model.safetensors ...   then start a new run from it",
    ),
)


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        files = locate_run(cfg.run_dir, cfg.checkpoint)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / EXPORT_FILE
        from xfmr.runs.export import export_run

        result = export_run(files, out)
    except UserError as e:
        fail(PROG, str(e))
    tied = ", ".join(f"{a} -> {b}" for a, b in result["tied"].items()) or "none"
    print(f"exported {result['tensors']} tensors of {files.checkpoint} (tied: {tied})")
    print(f"wrote {result['out']} (tokenizer: {result['tokenizer']})")


if __name__ == "__main__":
    main()
