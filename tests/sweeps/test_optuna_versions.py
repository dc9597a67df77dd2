"""A search under either major version of Optuna the package allows: the study records the
versions that started it, a study continued under another major version is refused in one line,
one started before versions were recorded is continued with one warning, and TPE is built with
the settings xfmr asks for rather than the version's defaults."""

from __future__ import annotations

import logging
import warnings
from importlib.metadata import version
from pathlib import Path

import optuna
import pytest

from xfmr.errors import UserError
from xfmr.sweeps.search import Param, build_sampler, open_storage, storage_spec
from xfmr.sweeps.study import VERSIONS, SearchSettings, open_study, study_storage

PARAMS = [Param("optim.lr", optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True))]


def _settings(sweep: Path) -> SearchSettings:
    return SearchSettings(
        storage=storage_spec(None, sweep),
        study_name="search",
        direction="minimize",
        n_trials=2,
        workers=1,
        sampler="tpe",
        sampler_args={"seed": 0},
        pruner=None,
        pruner_args={},
    )


def _open(sweep: Path) -> optuna.Study:
    settings = _settings(sweep)
    return open_study(settings, PARAMS, study_storage(settings.storage))


def test_a_new_study_records_the_versions_that_started_it(tmp_path: Path) -> None:
    study = _open(tmp_path)
    assert study.user_attrs[VERSIONS] == {"xfmr": version("xfmr"), "optuna": optuna.__version__}


def _started_under(sweep: Path, version: str | None) -> None:
    """A study in `sweep` with one finished trial, as Optuna `version` left it (None: as an
    xfmr that recorded no versions left it)."""
    storage = study_storage(_settings(sweep).storage)
    study = open_study(_settings(sweep), PARAMS, storage)
    study.add_trial(optuna.trial.create_trial(params={"optim.lr": 1e-3},
                                              distributions={"optim.lr": PARAMS[0].distribution},
                                              value=1.0))  # fmt: skip
    study_id = storage.get_study_id_from_name(study.study_name)
    attrs = storage.get_study_user_attrs(study_id)
    if version is None:
        storage.set_study_user_attr(study_id, VERSIONS, None)
    else:
        recorded = {**attrs[VERSIONS], "optuna": version}
        storage.set_study_user_attr(study_id, VERSIONS, recorded)


def test_another_major_version_is_refused_in_one_line(tmp_path: Path) -> None:
    major = int(optuna.__version__.split(".")[0])
    other = f"{major - 1}.9.0"
    _started_under(tmp_path, other)
    with pytest.raises(UserError) as refused:
        _open(tmp_path)
    message = str(refused.value)
    assert "\n" not in message
    assert f"started under Optuna {other}, and this is Optuna {optuna.__version__}" in message
    assert f"optuna=={other}" in message and "another hydra.sweep.dir" in message


def test_the_same_major_version_continues(tmp_path: Path) -> None:
    major = optuna.__version__.split(".")[0]
    _started_under(tmp_path, f"{major}.99.0")
    assert len(_open(tmp_path).trials) == 1


def test_a_study_without_versions_warns_once_and_continues(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _started_under(tmp_path, None)
    # The storage holds a null: as an attribute never set, it reads as no record.
    storage = open_storage(_settings(tmp_path).storage)
    study = optuna.load_study(study_name="search", storage=storage)
    assert study.user_attrs.get(VERSIONS) is None
    caplog.set_level(logging.WARNING, logger="xfmr")
    assert len(_open(tmp_path).trials) == 1
    [warned] = [r.getMessage() for r in caplog.records]
    assert "records no Optuna version" in warned and optuna.__version__ in warned
    caplog.clear()
    _open(tmp_path)
    assert caplog.records == []


def test_tpe_is_multivariate_with_a_constant_liar_under_any_version() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", optuna.exceptions.ExperimentalWarning)
        sampler = build_sampler("tpe", {"seed": 1}, PARAMS, seed_offset=0)
    assert (sampler._multivariate, sampler._constant_liar) == (True, True)
    own = build_sampler("tpe", {"multivariate": False}, PARAMS, seed_offset=0)
    assert (own._multivariate, own._constant_liar) == (False, True)
