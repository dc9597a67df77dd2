"""`xfmr-average`: average the parameters of a run's newest periodic checkpoints into
checkpoints/averaged.ckpt (Vaswani et al. 2017, sec. 6.1).

Arguments and the checkpoints on disk are checked before torch loads.
"""

from __future__ import annotations

import sys

from xfmr.cli.common import fail
from xfmr.cli.keyvalue import EntryPoint, parse_args
from xfmr.errors import DiskFull, UserError
from xfmr.run_dir.files import (
    AVERAGED_CHECKPOINT,
    CHECKPOINT_DIR,
    PERIODIC_GLOB,
)

PROG = "xfmr-average"
ENTRY = EntryPoint(
    prog=PROG,
    config_name="average",
    summary="average the newest periodic checkpoints of a run into "
    f"{CHECKPOINT_DIR}/{AVERAGED_CHECKPOINT}.",
    examples=(
        f"xfmr-average run_dir=RUN                 the newest 5 {CHECKPOINT_DIR}/{PERIODIC_GLOB}",
        "xfmr-average run_dir=RUN last=10 out=avg10.ckpt",
        "xfmr-eval run_dir=RUN checkpoint=averaged  then evaluate the average",
    ),
)


def main() -> None:
    cfg = parse_args(ENTRY, sys.argv[1:])
    try:
        from xfmr.api.runs import Run

        result = Run(cfg.run_dir).average(last=cfg.last, out=cfg.out)
    except (UserError, DiskFull) as e:
        fail(PROG, str(e), code=1 if isinstance(e, DiskFull) else 2)
    averaged = ", ".join(f"{a['file']} (step {a['global_step']})" for a in result["averaged_from"])
    print(f"averaged {len(result['averaged_from'])} checkpoints: {averaged}")
    print(f"wrote {result['out']}")


if __name__ == "__main__":
    main()
