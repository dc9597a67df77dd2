"""`xfmr.targets`: the keyword parameters of a config's `_target_`, read from its source without
importing it, are the ones `inspect.signature` finds once it is imported (following `**kwargs`
into the bases a class hands them to), for every target the shipped config tree names; and a
section built from a target refuses a key its class does not take, naming the nearest."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hydra.utils import get_object

from helpers.config import signature_defaults
from xfmr.errors import UserError
from xfmr.paths import config_dir
from xfmr.targets import Target, frozen, parameters


def _targets(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            yield node["_target_"]
        for value in node.values():
            yield from _targets(value)


SHIPPED = sorted(
    {
        target
        for path in config_dir().rglob("*.yaml")
        for target in _targets(yaml.safe_load(path.read_text()) or {})
    }
)


def test_the_config_tree_names_targets() -> None:
    assert len(SHIPPED) > 25 and "lightning.pytorch.Trainer" in SHIPPED


@pytest.mark.parametrize("target", SHIPPED)
def test_the_source_gives_the_parameters_the_signature_has(target: str) -> None:
    found = parameters(target)
    callable_ = get_object(target)
    if found is None:  # it hands **kwargs on where the source does not follow: it checks them
        init = callable_.__init__ if inspect.isclass(callable_) else callable_
        kinds = [p.kind for p in inspect.signature(init).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD in kinds, target
        return
    expected = set(signature_defaults(callable_))
    assert found == expected, (target, found ^ expected)


def test_a_key_the_target_does_not_take_is_refused_with_the_nearest() -> None:
    values = {"_target_": "torch.optim.AdamW", "_partial_": True, "lrr": 1e-3}
    with pytest.raises(UserError) as refused:
        Target.read("optim", values, supplied=("params",))
    message = str(refused.value)
    assert message.startswith("optim.lrr is not an optim key: did you mean optim.lr?")
    assert "params" not in message.split("valid keys:")[1], "the run gives the parameters"
    with pytest.raises(UserError, match="optim.params is not an optim key"):
        Target.read("optim", {"_target_": "torch.optim.AdamW", "params": []}, supplied=("params",))


def test_a_built_target_names_its_section_when_its_class_refuses_a_value() -> None:
    target = Target.read(
        "data", {"_target_": "xfmr.data.text.TextCorpusDataModule", "val_fraction": 2}
    )
    with pytest.raises(UserError, match=r"^data.val_fraction=2 must lie in \(0, 1\)$"):
        target.build()
    missing = Target("xfmr.data.nowhere.Module", section="data")
    with pytest.raises(UserError, match="data._target_=xfmr.data.nowhere.Module: no such class"):
        missing.build()


@pytest.mark.parametrize("target", SHIPPED)
def test_every_shipped_target_is_found_in_the_source(target: str) -> None:
    Target(target, section="x").check_exists()


def test_a_moved_or_missing_xfmr_target_is_refused_naming_where_it_is_now() -> None:
    moved = Target("xfmr.training.callbacks.StepProgressBar", section="callbacks.bar")
    with pytest.raises(UserError) as refused:
        moved.check_exists()
    assert str(refused.value) == (
        "callbacks.bar._target_=xfmr.training.callbacks.StepProgressBar: no such class or "
        "function; it is xfmr.training.progress_bars.StepProgressBar"
    )
    with pytest.raises(
        UserError, match=r"=xfmr.data.text.NoSuchModule: no such class or function$"
    ):
        Target("xfmr.data.text.NoSuchModule", section="data").check_exists()
    # A name the module imports, and a class's attribute, are found; another package's target
    # is found when built (its module may be compiled).
    Target("xfmr.config.run.Target", section="x").check_exists()
    Target("xfmr.targets.Target.build", section="x").check_exists()
    Target("torch.optim.NoSuchOptimizer", section="optim").check_exists()


def test_settings_are_frozen_and_a_section_pickles() -> None:
    target = Target.read("optim", {"_target_": "torch.optim.AdamW", "betas": [0.9, 0.99]})
    with pytest.raises(TypeError, match="frozen"):
        target.settings["lr"] = 1.0  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.path = "torch.optim.SGD"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(target)) == target
    assert target.to_dict() == {"_target_": "torch.optim.AdamW", "betas": [0.9, 0.99]}
    assert frozen({"a": {"b": [1, {"c": 2}]}}) == {"a": {"b": (1, {"c": 2})}}
