"""Which configs a `GROUP=VALUE` argument names, judged from the config files before anything is
composed, so that a typo is answered in one line listing the group's choices (Hydra's own message
buries the list). Values are read with Hydra's override grammar: `a,b`, `choice(...)`,
`range(...)`, `glob(...)` and `tag(...)` name the choices Hydra's basic sweeper would run.

xfmr-train and `xfmr.compose` judge their arguments here, the other entry points their groups."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.types import Glob, Override, QuotedString

# Groups of the shared config tree that the other entry points compose, not xfmr-train.
OTHER_TOOLS_GROUPS = {
    "generation": (
        "generation is for xfmr-generate, xfmr-eval and xfmr-attention (e.g. xfmr-eval "
        "run_dir=RUN generation=beam); xfmr-train's closing sample is set by "
        "callbacks.text_sample.* (temperature, top_k, max_new_tokens)"
    ),
}


def choice_problem(arguments: Sequence[str], config_dirs: Sequence[Path]) -> str | None:
    """Why one of xfmr-train's `group=value` arguments names no config of its group in
    `config_dirs` (or a group of another tool), or None. What only Hydra can judge (an argument
    its grammar refuses, nested groups such as hydra/launcher, a replaced search path) is left
    to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    overrides = []
    for argument in arguments:
        try:
            overrides.append(parser.parse_override(argument))
        except HydraException:
            continue  # Hydra reports its own grammar's errors
    if any(o.key_or_group == "hydra.searchpath" for o in overrides):
        config_dirs = []
    for override in overrides:
        problem = model_key_problem(override)
        if problem:
            return problem
        group = override.key_or_group
        if group.split(".")[0] in OTHER_TOOLS_GROUPS:
            return OTHER_TOOLS_GROUPS[group.split(".")[0]]
        if not config_dirs or "/" in group or group == "hydra":
            continue
        if any((root / group).is_dir() for root in config_dirs):
            problem = choice_error(override, group_choices(group, config_dirs))
            if problem:
                return problem
    return None


def model_key_problem(override: Override) -> str | None:
    """Why a `model.KEY=VALUE` argument names no model key or a value of the wrong type, judged
    from `ModelConfig`'s fields in one line; `pos.KEY=...`, the spelling from before positions
    moved under `model`, is answered with the new one. None when Hydra and the config check
    should judge it (a sweep's values, a key of a part of your own)."""
    from xfmr.keys import nearest_keys, unknown_key
    from xfmr.nn.model_keys import model_keys, value_problem

    key = override.key_or_group
    value = override.get_value_string() if not override.is_delete() else ""
    if key.startswith("pos."):
        return (
            f"{key}={value} is spelled model.{key}={value} now: positions are part of the model "
            "(the pos group still picks the scheme, e.g. pos=rotary)"
        )
    parts = key.split(".")
    if parts[0] != "model" or len(parts) < 2 or override.is_delete():
        return None
    top = [k for k in model_keys() if "." not in k] + ["pos"]
    if parts[1] not in top:
        return unknown_key("model", parts[1], top)
    if parts[1] == "pos" and len(parts) == 3:
        known = [k[4:] for k in model_keys() if k.startswith("pos.")]
        if parts[2] not in known and nearest_keys(parts[2], known):  # else: your scheme's own
            return unknown_key("model.pos", parts[2], known)
    if len(parts) == 2 and not override.is_sweep_override():
        plain = override.value()
        return value_problem(parts[1], plain.text if isinstance(plain, QuotedString) else plain)
    return None


def group_choices(group: str, config_dirs: Sequence[Path]) -> list[str]:
    """The configs of `group` (GROUP/NAME.yaml) found in any of `config_dirs`, sorted."""
    return sorted({path.stem for root in config_dirs for path in (root / group).glob("*.yaml")})


def not_a_choice(group: str, value: str, choices: Sequence[str]) -> str:
    return f"{group}={value!r} is not a choice of the `{group}` group; valid: {', '.join(choices)}"


def choice_error(override: Override, choices: Sequence[str]) -> str | None:
    """Why the group override `override` names a config its group lacks, or None if it does not.

    Left to Hydra and the sweeper, which know the current choice and the sweeper's own rules:
    `null`, a config in a subfolder (`experiment=mine/long`), deletions (`~group`) and
    interval sweeps.
    """
    group = override.key_or_group
    if override.is_delete() or override.is_interval_sweep():
        return None
    value = override.value()
    if isinstance(value, Glob):  # Hydra's glob matches the group's own configs, as here
        if value.filter(list(choices)):
            return None
        return (
            f"{group}={override.get_value_string()} matches no choice of the `{group}` group; "
            f"valid: {', '.join(choices)}"
        )
    values = override.sweep_iterator() if override.is_discrete_sweep() else [value]
    for name in _names(values):
        if name not in choices and "/" not in name:
            return not_a_choice(group, name, choices)
    return None


def _names(values: Any) -> Iterator[str]:
    """Config names among parsed values: a list selects several configs; null selects none; a
    dict is no config name, and Hydra says so itself."""
    for value in values:
        if isinstance(value, list):
            yield from _names(value)
        elif isinstance(value, QuotedString):
            yield value.text
        elif isinstance(value, bool):
            yield str(value).lower()
        elif value is not None and not isinstance(value, dict):
            yield str(value)
