"""A search's study: ask Optuna for a trial, run it as a job, tell Optuna how it ended.

One study per sweep, kept in the sweep directory (a journal file by default), so running the
same command again continues it: trials that finished are counted and not run again, trials
that a killed sweep left running are marked failed and their values queued again, and every
new trial gets a new number and so a new run directory.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from xfmr.errors import UserError
from xfmr.sweeps.jobs import JobOutcome
from xfmr.sweeps.runner import JobRunner
from xfmr.sweeps.search import Param, build_pruner, build_sampler, open_storage

log = logging.getLogger("xfmr")

INTERRUPTED = "interrupted"  # user attr of a trial whose sweep was killed under it
VERSIONS = "versions"  # user attr of a study: the xfmr and Optuna that started it


@dataclass(frozen=True)
class SearchSettings:
    storage: str
    study_name: str
    direction: str
    n_trials: int
    workers: int
    sampler: str
    sampler_args: dict[str, Any]
    pruner: str | None
    pruner_args: dict[str, Any]


def study_storage(spec: str) -> Any:
    """The storage `open_storage` opens, as an object even for an RDB URL (which Optuna would
    open inside create_study or load_study, out of reach): xfmr asks it, through its public
    methods, for the id a trial has there, and hands it to Optuna as the study's storage."""
    import optuna

    storage = open_storage(spec)
    return optuna.storages.RDBStorage(storage) if isinstance(storage, str) else storage


def open_study(settings: SearchSettings, params: list[Param], storage: Any):
    """The search's study in `storage` (`study_storage(settings.storage)`), created or
    continued, with its sampler built for the trials it holds."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=storage,
        study_name=settings.study_name,
        direction=settings.direction,
        pruner=build_pruner(settings.pruner, settings.pruner_args),
        load_if_exists=True,
    )
    check_versions(study, settings.storage)
    study.sampler = build_sampler(
        settings.sampler, settings.sampler_args, params, seed_offset=len(study.trials)
    )
    return study


def versions(*, search: bool = True) -> dict[str, str]:
    """The xfmr (as installed) and, for a search, the Optuna running this sweep (sweep.json
    and a search's study record them)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = {"xfmr": version("xfmr")}
    except PackageNotFoundError:  # run from a checkout that was never installed
        found = {"xfmr": "unknown"}
    if search:
        import optuna

        found["optuna"] = optuna.__version__
    return found


def check_versions(study: Any, storage: str) -> None:
    """A study continued under another major version of Optuna than the one that started it
    is refused: a major version may change a sampler's defaults and the storage's format
    (Optuna 5 made TPE multivariate, with a constant liar), and a search whose trials two
    samplers proposed is not one search. A study started before xfmr recorded versions is
    continued with one warning, and records the versions from then on."""
    now = versions()
    started = study.user_attrs.get(VERSIONS)
    if started is None:
        if study.trials:
            log.warning(
                "search %s: its study records no Optuna version (started by an older xfmr); "
                "continued under Optuna %s",
                study.study_name,
                now["optuna"],
            )
        study.set_user_attr(VERSIONS, now)
        return
    if _major(started["optuna"]) != _major(now["optuna"]):
        raise UserError(
            f"{storage} holds a search started under Optuna {started['optuna']}, and this is "
            f"Optuna {now['optuna']}: continue it with optuna=={started['optuna']} installed, "
            "or start a new search with another hydra.sweep.dir"
        )


def _major(version: str) -> str:
    return version.split(".")[0]


def requeue_interrupted(study: Any, storage: Any) -> None:
    """Trials still RUNNING when this sweep starts were left by a killed one: mark them failed
    (they never finished) and queue their values again. `storage`: the study's."""
    import optuna
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, frozen.number)
        optuna.trial.Trial(study, trial_id).set_user_attr(INTERRUPTED, True)
        tell(study, frozen.number, state=TrialState.FAIL)
        study.enqueue_trial(frozen.params, user_attrs={"retry_of": frozen.number})
        log.info("trial %d was left running by an earlier sweep: queued again", frozen.number)


def tell(study: Any, trial: Any, value: float | None = None, **kwargs: Any) -> None:
    """`study.tell`, except that GridSampler's wish to stop the study when its grid is done,
    which Optuna allows only inside `optimize()`, is let go: the trial is stored before it is
    raised (optuna/study/_tell.py stores it in a `finally`), and `Search._ask` stops at an
    exhausted grid itself."""
    try:
        study.tell(trial, value, **kwargs)
    except RuntimeError as e:
        if "Study.stop" not in str(e):
            raise


def finished_trials(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [
        t
        for t in study.get_trials(deepcopy=False, states=ended)
        if not t.user_attrs.get(INTERRUPTED)
    ]


class Search:
    """Runs trials until the study holds `n_trials` finished ones, `workers` at a time."""

    def __init__(
        self,
        runner: JobRunner,
        settings: SearchSettings,
        params: list[Param],
        fixed: list[str],
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.params = params
        self.fixed = fixed
        self.runner.shown_keys = {p.key for p in params}
        self.storage = study_storage(settings.storage)
        self.study = open_study(settings, params, self.storage)
        self._lock = threading.Lock()
        self._to_start = 0

    def run(self) -> None:
        requeue_interrupted(self.study, self.storage)
        done = len(finished_trials(self.study))
        self._to_start = max(0, self.settings.n_trials - done)
        log.info(
            "search %s: %d trials finished, %d to run, %d at a time",
            self.settings.study_name,
            done,
            self._to_start,
            self.settings.workers,
        )
        workers = max(1, min(self.settings.workers, self._to_start))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(self._worker) for _ in range(workers)]:
                future.result()

    def _worker(self) -> None:
        while (trial := self._ask()) is not None:
            overrides = [*self.fixed, *(p.override(trial.params[p.key]) for p in self.params)]
            trial.set_user_attr("overrides", overrides)
            trial.set_user_attr("dir", str(self.runner.job_dir(trial.number, overrides)))
            self._tell(trial, self.runner.run(trial.number, overrides))

    def _ask(self) -> Any:
        with self._lock:
            sampler = self.study.sampler
            if self._to_start <= 0 or (
                hasattr(sampler, "is_exhausted") and sampler.is_exhausted(self.study)
            ):
                return None
            self._to_start -= 1
            distributions = {p.key: p.distribution for p in self.params}
            return self.study.ask(distributions)

    def _tell(self, trial: Any, outcome: JobOutcome) -> None:
        from optuna.trial import TrialState

        if outcome.reason:
            trial.set_user_attr("reason", outcome.reason[:1000])
        if outcome.status == "completed":
            tell(self.study, trial, outcome.value)
        elif outcome.status == "pruned":
            tell(self.study, trial, state=TrialState.PRUNED)
        else:
            if outcome.status == INTERRUPTED:
                trial.set_user_attr(INTERRUPTED, True)
            tell(self.study, trial, state=TrialState.FAIL)

    def outcomes(self) -> list[JobOutcome]:
        """Every finished trial of the study, this sweep's and earlier ones'."""
        from optuna.trial import TrialState

        status = {
            TrialState.COMPLETE: "completed",
            TrialState.PRUNED: "pruned",
            TrialState.FAIL: "failed",
        }
        return [
            JobOutcome(
                num=t.number,
                overrides=list(t.user_attrs.get("overrides", [])),
                dir=t.user_attrs.get("dir", ""),
                status=status[t.state],
                value=t.value if t.state == TrialState.COMPLETE else None,
                step=t.last_step,
                reason=t.user_attrs.get("reason"),
            )
            for t in finished_trials(self.study)
        ]
