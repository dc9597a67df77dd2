"""The group YAML files state every key (Hydra overrides only a key that is there), so many
restate a default of the class or function their `_target_` names. Here each such value is held
to that default: a changed constructor default fails, naming the YAML file and key, unless the
pair is in DELIBERATE with the reason the file differs.

Every mapping with a `_target_` in a group file is checked (a file that inherits its target
through its defaults list, trainer/cpu.yaml from trainer/default.yaml, against that target), and
the groups read into a dataclass without one (GROUP_CLASSES). A key's default is the one the
target's signature gives (following `**kwargs` into the base classes a class passes them to), or
for a dataclass what it makes of the key left out, given the file's other keys
(`TokenizerSpec` resolves its special tokens per kind). Skipped: interpolations (`${...}`),
`???`, keys without a default, nested targets (checked on their own), a key whose value is the
file's own name (tokenizer/bpe.yaml's `kind: bpe` is the choice the file is for), and the groups
that describe the model (arch, pos, size: xfmr.nn.config is their single statement) or are
experiments, searches and debug settings, which change values on purpose.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from helpers.config import signature_defaults
from xfmr.paths import config_dir

SKIPPED_GROUPS = {"arch", "pos", "size", "model", "experiment", "hparams_search", "debug"}
# Groups without a `_target_`, and the dataclass xfmr reads each into.
GROUP_CLASSES = {
    "tokenizer": "xfmr.text.tokenizers.TokenizerSpec",
    "generation": "xfmr.generation.config.GenerationConfig",
}
# Keys a file leaves to the command line, and a stand-in for each, so that the target can say
# what it makes of the file's other keys (TokenizerSpec refuses kind=pretrained without a path).
GIVEN_LATER = {("tokenizer/pretrained.yaml", "path"): "tokenizer.json"}
NO_DEFAULT = inspect.Parameter.empty

_LIGHTNING_PICKS = "Lightning's default (None) decides at run time; xfmr states the value it uses"
_WARMUP = "warmup_ratio decides the warm-up; warmup_steps=null hands it over (ranges.warmup_length)"
_VOCAB = "a trained vocabulary's size is required for this kind; the default (None) is char's"
# (group file, key) -> why the file's value differs from its target's default.
DELIBERATE = {
    ("generation/greedy.yaml", "max_new_tokens"): (
        "null: the commands fit it to the length the run trained on; GenerationConfig, used "
        "directly with a model, needs a number"
    ),
    ("callbacks/default.yaml", "model_checkpoint.filename"): "best.ckpt (xfmr.run_dir.files)",
    ("callbacks/default.yaml", "model_checkpoint.monitor"): "the best checkpoint by val/loss",
    ("callbacks/default.yaml", "model_checkpoint.save_last"): "resuming needs last.ckpt",
    ("callbacks/default.yaml", "model_checkpoint.auto_insert_metric_name"): (
        "a fixed name, best.ckpt, that xfmr-eval and init_from find"
    ),
    ("callbacks/default.yaml", "periodic_checkpoint.filename"): "step-NNNNNNN.ckpt, sortable",
    ("callbacks/default.yaml", "periodic_checkpoint.auto_insert_metric_name"): (
        "the step is in filename already"
    ),
    ("callbacks/default.yaml", "periodic_checkpoint.every_n_train_steps"): (
        "off until asked for (0), with every_n_epochs 0"
    ),
    ("callbacks/default.yaml", "periodic_checkpoint.every_n_epochs"): (
        "never by epochs: a run is counted in steps"
    ),
    ("callbacks/default.yaml", "periodic_checkpoint.monitor"): "the newest steps are kept",
    ("callbacks/default.yaml", "periodic_checkpoint.mode"): "max step: the newest are the best",
    ("callbacks/default.yaml", "periodic_checkpoint.save_top_k"): (
        "the newest 5, what xfmr-average averages by default"
    ),
    ("callbacks/default.yaml", "progress_bar.leave"): "the last bar stays on screen",
    ("callbacks/default.yaml", "progress_bar.refresh_rate"): (
        "every step: the bar shows logging steps' figures (StepProgressBar redraws cheaply)"
    ),
    ("callbacks/default.yaml", "lr_monitor.logging_interval"): "per optimizer step, not epoch",
    ("data/documents.yaml", "cache"): "the memory-mapped token cache on for shipped runs",
    ("data/synthetic.yaml", "batch_size"): "the toy language's shipped run: 32 windows a batch",
    ("data/synthetic.yaml", "val_batches"): "nanoGPT's eval_iters: 200 (None reads every window)",
    ("data/synthetic_translation.yaml", "max_length"): "toy pairs are short: 64 tokens",
    ("data/synthetic_translation.yaml", "batch_size"): "the toy task's shipped run: 32 pairs",
    ("data/text.yaml", "cache"): "the memory-mapped token cache on for shipped runs",
    ("data/text.yaml", "val_batches"): "nanoGPT's eval_iters: 200 (None reads every window)",
    ("generation/sample.yaml", "top_p"): "nucleus sampling at 0.9 (Holtzman et al. 2020)",
    ("generation/sample.yaml", "seed"): "reproducible samples unless a seed is given",
    ("logger/csv.yaml", "csv.name"): "RUN_DIR/csv/metrics.csv, not lightning_logs/",
    ("logger/csv.yaml", "csv.version"): "no version_N folder: one run per directory",
    ("logger/tensorboard.yaml", "tensorboard.name"): "RUN_DIR/tensorboard, not lightning_logs/",
    ("logger/tensorboard.yaml", "tensorboard.version"): "no version_N folder: one run per dir",
    ("logger/tensorboard.yaml", "tensorboard.default_hp_metric"): (
        "no placeholder hp_metric: log_run_params records the config's parameters"
    ),
    ("optim/adam_vaswani.yaml", "lr"): "1.0 times the Noam schedule's factor (Vaswani et al.)",
    ("optim/adam_vaswani.yaml", "betas"): "Vaswani et al. 2017, sec. 5.3: beta2 0.98",
    ("optim/adam_vaswani.yaml", "eps"): "Vaswani et al. 2017, sec. 5.3: 1e-9",
    ("optim/adam_vaswani.yaml", "fused"): "one fused kernel for the update: faster on CPU",
    ("optim/adamw.yaml", "betas"): "nanoGPT's beta2 0.99 for small batches",
    ("optim/adamw.yaml", "weight_decay"): "nanoGPT's 0.1",
    ("optim/adamw.yaml", "fused"): "one fused kernel for the update: faster on CPU",
    ("schedule/constant.yaml", "warmup_steps"): _WARMUP,
    ("schedule/constant.yaml", "warmup_ratio"): "no warm-up unless asked for",
    ("schedule/inverse_sqrt.yaml", "warmup_steps"): _WARMUP,
    ("schedule/inverse_sqrt.yaml", "warmup_ratio"): "4000 of Vaswani et al.'s 100k steps",
    ("schedule/linear.yaml", "warmup_steps"): _WARMUP,
    ("schedule/linear.yaml", "warmup_ratio"): "no warm-up unless asked for",
    ("schedule/noam.yaml", "warmup_steps"): _WARMUP,
    ("schedule/noam.yaml", "warmup_ratio"): "4000 of Vaswani et al.'s 100k steps",
    ("schedule/warmup_cosine.yaml", "warmup_steps"): _WARMUP,
    ("schedule/warmup_cosine.yaml", "warmup_ratio"): "100 of the default 600 steps",
    ("tokenizer/bpe.yaml", "vocab_size"): _VOCAB,
    ("tokenizer/byte_bpe.yaml", "vocab_size"): _VOCAB,
    ("tokenizer/byte_bpe.yaml", "special_tokens"): "GPT-2's <|endoftext|> and no unknowns",
    ("tokenizer/byte_bpe.yaml", "unk_token"): "bytes cover every text: nothing is unknown",
    ("tokenizer/unigram.yaml", "vocab_size"): _VOCAB,
    ("tokenizer/wordpiece.yaml", "vocab_size"): _VOCAB,
    ("trainer/default.yaml", "devices"): "one device unless asked for (trainer=ddp: 2)",
    ("trainer/default.yaml", "precision"): "xfmr's auto, chosen per device (checks.py)",
    ("trainer/default.yaml", "max_steps"): "a run is counted in steps: 600 by default",
    ("trainer/default.yaml", "max_epochs"): "no epoch limit: max_steps ends the run",
    ("trainer/default.yaml", "val_check_interval"): "every 100 optimizer steps",
    ("trainer/default.yaml", "check_val_every_n_epoch"): "val_check_interval counts across epochs",
    ("trainer/default.yaml", "limit_val_batches"): _LIGHTNING_PICKS,
    ("trainer/default.yaml", "num_sanity_val_steps"): "one batch: a broken validation fails early",
    ("trainer/default.yaml", "log_every_n_steps"): "every 10 steps (Lightning's 50)",
    ("trainer/default.yaml", "gradient_clip_val"): "clip the gradient norm at 1.0 (nanoGPT)",
    ("trainer/default.yaml", "enable_model_summary"): _LIGHTNING_PICKS,
    ("trainer/default.yaml", "enable_progress_bar"): _LIGHTNING_PICKS,
    ("trainer/default.yaml", "deterministic"): _LIGHTNING_PICKS,
    ("trainer/cpu.yaml", "devices"): "one process, as trainer/default.yaml",
    ("trainer/ddp.yaml", "devices"): "two processes, the smallest DDP run",
}


@dataclasses.dataclass(frozen=True)
class Node:
    """One mapping of a group file read into a target: where it is and what it says."""

    file: str  # GROUP/NAME.yaml
    path: str  # its keys' prefix in the file ("" for the top)
    target: str
    values: dict[str, Any]


def group_files() -> list[Path]:
    return [
        path
        for path in sorted(config_dir().glob("*/*.yaml"))
        if path.parent.name not in SKIPPED_GROUPS
    ]


def _read(path: Path) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def _inherited_target(path: Path) -> str | None:
    """The `_target_` a file gets from the files of its group that its defaults list names."""
    for parent in _read(path).get("defaults") or []:
        if isinstance(parent, str) and (path.parent / f"{parent}.yaml").is_file():
            sibling = path.parent / f"{parent}.yaml"
            found = _read(sibling).get("_target_") or _inherited_target(sibling)
            if found:
                return found
    return None


def _targets(tree: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    if isinstance(tree, dict):
        if "_target_" in tree:
            yield path, tree
        for key, value in tree.items():
            yield from _targets(value, (*path, key))


def nodes() -> list[Node]:
    found = []
    for path in group_files():
        name = path.relative_to(config_dir()).as_posix()
        tree = _read(path)
        targets = list(_targets(tree))
        if not targets:
            target = _inherited_target(path) or GROUP_CLASSES.get(path.parent.name)
            targets = [((), {**tree, "_target_": target})] if target else []
        for keys, values in targets:
            found.append(Node(name, ".".join(keys), values["_target_"], values))
    return found


def default_of(node: Node, key: str, target: Any) -> Any:
    """What `target` makes of `key` left out of the node."""
    if dataclasses.is_dataclass(target):
        given = {k: v for k, v in _settings(node).items() if k != key}
        given |= {k: v for (file, k), v in GIVEN_LATER.items() if file == node.file and k != key}
        try:
            return getattr(target(**given), key)
        except (TypeError, ValueError):  # the others alone are refused: the field's default
            field = {f.name: f for f in dataclasses.fields(target)}[key]
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            return NO_DEFAULT
    return signature_defaults(target).get(key, NO_DEFAULT)


def _settings(node: Node) -> dict[str, Any]:
    """The node's keys that are the target's arguments."""
    fields = None
    target = get_object(node.target)
    if dataclasses.is_dataclass(target):
        fields = {f.name for f in dataclasses.fields(target)}
    return {
        k: v
        for k, v in node.values.items()
        if not k.startswith("_") and k != "defaults" and (fields is None or k in fields)
    }


def _stated(value: Any) -> bool:
    """A value the file states, not one it leaves to another key or to the command line."""
    if isinstance(value, str) and ("${" in value or value == "???"):
        return False
    return not (isinstance(value, dict) and "_target_" in value)


def same(value: Any, default: Any) -> bool:
    """YAML's value and a Python default alike: lists for tuples, numbers by value, and a
    bool only equal to a bool."""
    if isinstance(default, tuple | list) and isinstance(value, list):
        return len(value) == len(default) and all(map(same, value, default))
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    return value == default


def compared() -> list[tuple[str, str, Any, Any]]:
    """(file, key, the file's value, the target's default) for every default a file restates."""
    rows = []
    for node in nodes():
        target = get_object(node.target)
        own_name = Path(node.file).stem
        for key, value in _settings(node).items():
            if not _stated(value) or (value == own_name and not node.path):
                continue
            default = default_of(node, key, target)
            if default is not NO_DEFAULT:
                rows.append((node.file, f"{node.path}.{key}".lstrip("."), value, default))
    return rows


@pytest.fixture(scope="module")
def restated() -> list[tuple[str, str, Any, Any]]:
    return compared()


def test_yaml_values_agree_with_their_targets_defaults(restated) -> None:
    differ = [
        f"{file} {key}: {value!r}, but the default is {default!r}"
        for file, key, value, default in restated
        if not same(value, default) and (file, key) not in DELIBERATE
    ]
    assert not differ, (
        "a YAML value differs from its constructor's default: make them agree, or add the "
        "(file, key) to DELIBERATE with the reason:\n" + "\n".join(differ)
    )


def test_every_deliberate_difference_is_still_one(restated) -> None:
    """An entry whose value now agrees, or whose key is gone, would excuse a later change."""
    differing = {(file, key) for file, key, value, default in restated if not same(value, default)}
    stale = sorted(DELIBERATE.keys() - differing)
    assert not stale, f"DELIBERATE entries that no longer differ: {stale}"


def test_the_check_reads_every_group_and_most_keys(restated) -> None:
    """The check cannot pass by reading nothing: each group it covers is there, with the
    defaults it restates."""
    groups = {file.split("/")[0] for file, *_ in restated}
    covered = {"callbacks", "data", "generation", "logger", "objective", "optim", "schedule"}
    assert groups >= covered | {"tokenizer", "trainer"}, groups
    assert sum(same(value, default) for _, _, value, default in restated) > 100


def test_same_compares_as_yaml_and_python_mean() -> None:
    assert same([0.9, 0.99], (0.9, 0.99)) and not same([0.9, 0.98], (0.9, 0.99))
    assert same(256, 256.0) and not same(1, True) and not same(0, False)
    assert same(None, None) and not same("auto", None)
