"""Where a run directory keeps what `xfmr-train` wrote, found and checked without torch so the
entry points that use a run answer a mistake in about a second. Every name a run, a sweep or
an export gives a file is spelled here once (tests/run_dir/test_run_file_names.py holds src/ to it).

    RUN_DIR/config.yaml                      the run's config, with what it chose itself
    RUN_DIR/tokenizer.json                   the run's tokenizer
    RUN_DIR/labels.json                      the label set (classification, tagging runs)
    RUN_DIR/results.json                     how the run ended: status, metrics, history
    RUN_DIR/train.log                        the log (Hydra's, named after the job)
    RUN_DIR/.lock                            held while xfmr-train trains here (its pid)
    RUN_DIR/.hydra/overrides.yaml            a sweep job's overrides (Hydra's; earlier
                                             versions' single runs too)
    RUN_DIR/csv/metrics.csv                  every logged metric (logger=csv, Lightning's CSVLogger)
    RUN_DIR/ddp/rankN.log                    the output of DDP workers xfmr launched
    RUN_DIR/checkpoints/{best,last}.ckpt     best by val/loss, and the last state
    RUN_DIR/checkpoints/step-NNNNNNN.ckpt    periodic checkpoints (callbacks.periodic_checkpoint)
    RUN_DIR/checkpoints/averaged.ckpt        their average (xfmr-average)
    RUN_DIR/checkpoints/NAME.ckpt/           under trainer=fsdp each of the above but the
                                             average is a folder: every rank's shard
                                             (torch.distributed.checkpoint) and meta.pt
    RUN_DIR/model.safetensors                the weights for sharing (xfmr-export)
    RUN_DIR/hf/                              a Hugging Face folder (xfmr-export format=hf)
    RUN_DIR/eval.json                        xfmr-eval's report

    SWEEP_DIR/sweep.json                     every job's outcome and the best (xfmr-train -m)
    SWEEP_DIR/multirun.yaml                  the sweep's config (Hydra's name)
    SWEEP_DIR/optuna.journal                 a search's study (hydra/sweeper=search)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from xfmr.errors import UserError

CONFIG_FILE = "config.yaml"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
RESULTS_FILE = "results.json"
LOCK_FILE = ".lock"
# Hydra's own record of the job (hydra.output_subdir) and the overrides in it.
HYDRA_DIR = ".hydra"
OVERRIDES_FILE = "overrides.yaml"
# Lightning's CSVLogger writes its rows to this file (in RUN_DIR/csv with logger=csv).
METRICS_FILE = "metrics.csv"
DDP_LOG_DIR = "ddp"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_SUFFIX = ".ckpt"
BEST_CHECKPOINT = "best.ckpt"  # callbacks.model_checkpoint.filename, plus the suffix
LAST_CHECKPOINT = "last.ckpt"  # Lightning's name for save_last's file, and the end's state
AVERAGED_CHECKPOINT = "averaged.ckpt"
# checkpoint=NAME picks checkpoints/NAME.ckpt; anything else is a path.
CHECKPOINT_NAMES = tuple(
    name.removesuffix(CHECKPOINT_SUFFIX)
    for name in (BEST_CHECKPOINT, LAST_CHECKPOINT, AVERAGED_CHECKPOINT)
)
PERIODIC_GLOB = "step-*.ckpt"  # callbacks.periodic_checkpoint.filename's files
# A sharded checkpoint's folder holds torch.distributed.checkpoint's index of the shards and
# the training loop's state that Lightning writes beside them (lightning.fabric's
# _METADATA_FILENAME).
SHARDS_INDEX_FILE = ".metadata"
SHARDED_STATE_FILE = "meta.pt"
EXPORT_FILE = "model.safetensors"
SAFETENSORS_SUFFIX = ".safetensors"  # an xfmr-export file: weights only
# xfmr-export's formats, and format=hf's folder inside the run when no `out` is given.
EXPORT_FORMATS = ("safetensors", "hf")
HF_FOLDER = "hf"
EVAL_FILE = "eval.json"  # xfmr-eval's report when no `out` is given
LM_EVAL_FILE = "lm_eval.json"  # xfmr-eval tasks=: lm-evaluation-harness's whole report

SWEEP_FILE = "sweep.json"
MULTIRUN_FILE = "multirun.yaml"
JOURNAL_FILE = "optuna.journal"

# A Hugging Face folder (written by xfmr-export format=hf, read by init_from=hf:PATH) keeps the
# names transformers gives its files; these are the ones xfmr itself looks for or writes.
# Spelled alike but not the run's files: a run's tokenizer.json is not the folder's.
HF_CONFIG_FILE = "config.json"  # transformers.utils.CONFIG_NAME
HF_TOKENIZER_FILE = "tokenizer.json"  # transformers.tokenization_utils_fast.TOKENIZER_FILE
HF_MODEL_CARD_FILE = "README.md"  # what the Hub shows as the model card


def check_export_format(format: str) -> None:
    if format not in EXPORT_FORMATS:
        raise UserError(f"format={format!r} is not one of {list(EXPORT_FORMATS)}")


def is_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint on disk: a file, or the folder of a sharded one."""
    return path.is_file() or is_sharded_checkpoint(path)


def is_sharded_checkpoint(path: Path) -> bool:
    """Whether `path` is the folder of a sharded checkpoint (trainer=fsdp)."""
    return (path / SHARDS_INDEX_FILE).is_file() and (path / SHARDED_STATE_FILE).is_file()


@dataclass(frozen=True)
class RunFiles:
    """The files of one run directory that an entry point reads."""

    run_dir: Path
    config: Path
    tokenizer: Path
    checkpoint: Path


def locate_run(run_dir: str | Path | None, checkpoint: str | Path | None = None) -> RunFiles:
    """The run's config, tokenizer and the checkpoint named by `checkpoint`: best, last,
    averaged, a path, or None for best, else last. Anything missing is one UserError that
    names the path and lists what the directory holds."""
    root = run_directory(run_dir)
    missing = [name for name in (CONFIG_FILE, TOKENIZER_FILE) if not (root / name).is_file()]
    if missing:
        raise UserError(
            f"run_dir={str(run_dir)!r} has no {' or '.join(missing)}, so it is not a run "
            f"directory written by xfmr-train; it holds: {describe(root)}"
        )
    return RunFiles(
        run_dir=root,
        config=root / CONFIG_FILE,
        tokenizer=root / TOKENIZER_FILE,
        checkpoint=checkpoint_file(root, checkpoint),
    )


def run_directory(run_dir: str | Path | None) -> Path:
    if run_dir is None or str(run_dir) == "":
        raise UserError(
            "run_dir is not set: give a directory written by xfmr-train, e.g. "
            "run_dir=outputs/train/runs/DATE_TIME"
        )
    root = Path(str(run_dir)).expanduser()
    if not root.is_dir():
        raise UserError(
            f"run_dir={str(run_dir)!r} is not a directory: give a directory written by xfmr-train"
        )
    return root


def checkpoint_file(root: Path, checkpoint: str | Path | None) -> Path:
    ckpt_dir = root / CHECKPOINT_DIR
    if checkpoint is None or str(checkpoint) == "":
        for name in (BEST_CHECKPOINT, LAST_CHECKPOINT):
            if is_checkpoint(ckpt_dir / name):
                return ckpt_dir / name
        raise UserError(
            f"run_dir={str(root)!r} has no checkpoint ({CHECKPOINT_DIR}/{BEST_CHECKPOINT} or "
            f"{CHECKPOINT_DIR}/{LAST_CHECKPOINT}); it holds: {describe(root)}"
        )
    if str(checkpoint) in CHECKPOINT_NAMES:
        path = ckpt_dir / f"{checkpoint}{CHECKPOINT_SUFFIX}"
        if not is_checkpoint(path):
            hint = " (xfmr-average writes it)" if path.name == AVERAGED_CHECKPOINT else ""
            raise UserError(
                f"checkpoint={checkpoint}: {path} does not exist{hint}; {CHECKPOINT_DIR}/ "
                f"holds: {', '.join(checkpoint_names(root)) or 'no .ckpt files'}"
            )
        return path
    path = Path(str(checkpoint)).expanduser()
    if not is_checkpoint(path):
        raise UserError(
            f"checkpoint={str(checkpoint)!r} does not exist: give one of "
            f"{list(CHECKPOINT_NAMES)}, a .ckpt file written by xfmr-train or xfmr-average, or "
            "a .safetensors file written by xfmr-export"
        )
    return path


def checkpoint_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / CHECKPOINT_DIR).glob(f"*{CHECKPOINT_SUFFIX}"))


def periodic_checkpoints(root: Path, *, at_least: int = 0) -> list[Path]:
    """The periodic checkpoints on disk, sorted by name (their step is inside); fewer than
    `at_least` is a UserError listing what the run's checkpoints/ holds."""
    found = sorted((root / CHECKPOINT_DIR).glob(PERIODIC_GLOB))
    if len(found) < at_least:
        raise UserError(
            f"last={at_least}, but {root / CHECKPOINT_DIR} holds {len(found)} periodic "
            f"checkpoints ({PERIODIC_GLOB}): {', '.join(checkpoint_names(root)) or 'no .ckpt files'}; "
            "train with callbacks.periodic_checkpoint.every_n_train_steps=N to write them"
        )
    return found


def describe(root: Path, limit: int = 12) -> str:
    """What a directory holds, for messages: its entries and the checkpoints inside."""
    if not root.is_dir():
        return "nothing (it does not exist)"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())
    if not names:
        return "nothing (it is empty)"
    shown = ", ".join(names[:limit]) + (
        f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    )
    checkpoints = checkpoint_names(root)
    if (root / CHECKPOINT_DIR).is_dir():
        shown += f"; {CHECKPOINT_DIR}/ holds: {', '.join(checkpoints) or 'no .ckpt files'}"
    return shown


def make_writable_dir(path: Path, *, key: str) -> None:
    """Create `path` (the directory `key` names) if need be and write a file in it; else one
    UserError naming it, before any work that would be lost."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise UserError(
            f"{key}={str(path)!r} cannot be written ({e.strerror or e}): give a directory "
            "xfmr-train can create and write in"
        ) from None


def read_labels(root: Path) -> list[str] | None:
    """The label set a classification or tagging run was trained on (RUN_DIR/labels.json);
    None for a run without one (another objective, or written before runs kept their labels)."""
    path = root / LABELS_FILE
    if not path.is_file():
        return None
    try:
        labels = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path} is not a JSON list of labels ({e})") from None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise UserError(f"{path} is not a JSON list of labels (strings): {labels!r:.200}")
    return labels
