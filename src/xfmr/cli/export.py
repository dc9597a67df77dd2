"""`xfmr-export`: a run's model weights as a .safetensors file (with its tokenizer.json beside
it), or (format=hf) as a folder Hugging Face transformers loads without xfmr.

Arguments and the run directory are checked before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, parse_args
from xfmr.errors import UserError
from xfmr.run_dir.files import EXPORT_FILE, HF_FOLDER, check_export_format, locate_run

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
    try:
        check_export_format(cfg.format)
        files = locate_run(cfg.run_dir, cfg.checkpoint)
        if cfg.format == "hf":
            return _export_hf(cfg, files)
        out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / EXPORT_FILE
        from xfmr.runs.export import export_run

        result = export_run(files, out)
    except UserError as e:
        fail(PROG, str(e))
    tied = ", ".join(f"{a} -> {b}" for a, b in result["tied"].items()) or "none"
    print(f"exported {result['tensors']} tensors of {files.checkpoint} (tied: {tied})")
    print(f"wrote {result['out']} (tokenizer: {result['tokenizer']})")


def _export_hf(cfg, files) -> None:
    out = Path(str(cfg.out)).expanduser() if cfg.out else files.run_dir / HF_FOLDER
    from xfmr.runs.export_hf import export_hf

    result = export_hf(files.run_dir, out, checkpoint=str(files.checkpoint))
    print(f"exported {result['checkpoint']} as {result['hf_class']}")
    print(f"wrote {result['out']}: {', '.join(result['files'])}")


if __name__ == "__main__":
    main()
