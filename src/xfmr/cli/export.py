"""`xfmr-export`: a run's model weights as a .safetensors file (with its tokenizer.json beside
it), or (format=hf) as a folder Hugging Face transformers loads without xfmr.

Arguments and the run directory are checked before torch loads.
"""

from __future__ import annotations

import sys

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, parse_args
from xfmr.errors import UserError
from xfmr.run_dir.files import EXPORT_FILE, check_export_format, locate_run

PROG = "xfmr-export"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="export",
    summary="write a run's model as a .safetensors file, or as a Hugging Face folder (format=hf).",
    examples=(
        f"xfmr-export run_dir=RUN                     RUN/{EXPORT_FILE} from the best checkpoint",
        f"xfmr-export run_dir=RUN checkpoint=averaged out=share/{EXPORT_FILE}",
        "xfmr-export run_dir=RUN format=hf out=share/my-model   a folder transformers loads",
        f"xfmr-train init_from=RUN/{EXPORT_FILE} ...   then start a new run from it",
    ),
)


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    from xfmr.api.runs import Run

    try:
        check_export_format(cfg.format)
        files = locate_run(cfg.run_dir, cfg.checkpoint)  # before anything loads
        result = Run(files.run_dir).exported(
            cfg.out, format=cfg.format, checkpoint=files.checkpoint
        )
    except UserError as e:
        fail(PROG, str(e))
    if cfg.format == "hf":
        print(f"exported {result['checkpoint']} as {result['hf_class']}")
        print(f"wrote {result['out']}: {', '.join(result['files'])}")
        return
    tied = ", ".join(f"{a} -> {b}" for a, b in result["tied"].items()) or "none"
    print(f"exported {result['tensors']} tensors of {result['checkpoint']} (tied: {tied})")
    print(f"wrote {result['out']} (tokenizer: {result['tokenizer']})")


if __name__ == "__main__":
    main()
