"""Declarations read from source without importing it (`xfmr.declared`), and the same answers
as importing where the source cannot tell; the registry built on it (`objectives.registry`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from xfmr.declared import declared
from xfmr.errors import UserError
from xfmr.objectives.registry import data_choices, data_gives, objective_facts, objectives

SOURCE = """
import sys
from decl_base import Base

sys.modules[__name__].imported = True  # marks that the module ran


def declare(**facts):
    def mark(function):
        function.__dict__.update(facts)
        return function
    return mark


class Literal:
    archs = ("decoder", "rnn")
    reads = "text"


class Child(Base):
    reads = "pairs"


class Computed:
    archs = tuple(["encoder"])


@declare(gives=("text", "pairs"))
def factory():
    pass
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "decl_base.py").write_text(
        'class Base:\n    archs = ("encoder",)\n    segments = 2\n'
    )
    (tmp_path / "decl_mod.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("decl_mod", "decl_base"):
        sys.modules.pop(name, None)


def test_literals_in_the_class_body_are_read_without_importing(modules: Path) -> None:
    assert declared("decl_mod.Literal", ("archs", "reads", "segments")) == {
        "archs": ("decoder", "rnn"),
        "reads": "text",
    }
    assert declared("decl_mod.Child", ("archs", "reads", "segments")) == {
        "archs": ("encoder",),  # from the base class, followed through its import
        "reads": "pairs",
        "segments": 2,
    }
    assert declared("decl_mod.factory", ("gives",)) == {"gives": ("text", "pairs")}
    assert "decl_mod" not in sys.modules


def test_what_the_source_cannot_tell_is_asked_of_the_imported_class(modules: Path) -> None:
    assert declared("decl_mod.Computed", ("archs",)) == {"archs": ("encoder",)}
    assert sys.modules["decl_mod"].imported


def test_each_shipped_objective_is_its_config_name_and_declares_what_its_class_holds() -> None:
    import importlib

    from xfmr.objectives.contract import Objective
    from xfmr.objectives.registry import shipped

    for choice, target in shipped("objective").items():
        facts = objective_facts(target)
        module, _, name = target.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, Objective)
        assert facts.name == cls.name == choice  # conf/objective/NAME.yaml trains objective NAME
        assert (facts.archs, facts.reads, facts.segments, facts.heads) == (
            cls.archs,
            cls.reads,
            cls.segments,
            cls.heads,
        )
    assert set(objectives()) == set(shipped("objective"))


def test_data_groups_declare_the_kind_they_give() -> None:
    assert data_gives("xfmr.data.text.TextCorpusDataModule") == "text"
    assert data_gives("xfmr.data.synthetic.SyntheticCorpusDataModule") == "text"  # inherited
    assert data_gives("xfmr.data.hf.hf_datamodule") == ("text", "labelled", "pairs")
    assert data_choices("pairs") == ["hf", "parallel", "synthetic_translation"]
    assert data_choices("tagged") == ["conll"]


def test_a_target_that_does_not_exist_or_declares_nothing_is_named() -> None:
    with pytest.raises(UserError, match=r"objective._target_=xfmr.objectives.clm.Nope: no such"):
        objective_facts("xfmr.objectives.clm.Nope")
    with pytest.raises(UserError, match=r"does not declare \['name', 'archs', 'reads'\]"):
        objective_facts("xfmr.objectives.common.IGNORE_INDEX")


def test_an_objective_that_declares_a_kind_no_data_gives_is_refused_at_once() -> None:
    from xfmr.objectives.contract import Objective

    with pytest.raises(TypeError, match=r"reads='sentences': use one of \['text'"):

        class Wrong(Objective):  # noqa: F841
            name, archs, reads = "wrong", ("decoder",), "sentences"
