"""`hydra/sweeper=xfmr` and `hydra/launcher=xfmr`, xfmr's defaults (conf/hydra/default.yaml).

The sweeper runs a grid over the command line's sweeps, or, with `sampler` set (the
hparams_search group sets it), an Optuna search over `params`. The launcher runs each job in
a child process, so a job that fails in any way is recorded and the sweep goes on; the job's
output goes to its run directory's log.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper


@dataclass
class XfmrSweeperConf:
    _target_: str = "hydra_plugins.xfmr_sweeper.plugins.XfmrSweeper"
    # The search space, in Hydra's sweep syntax: {optim.lr: "tag(log, interval(1e-4, 1e-2))"}.
    params: dict[str, str] | None = None
    # null: a grid over the command line's sweeps. tpe | random | grid | cmaes | qmc: a search.
    sampler: str | None = None
    sampler_args: dict[str, Any] = field(default_factory=dict)
    # median | percentile | hyperband | successive_halving | none; each validation reports.
    pruner: str | None = "median"
    pruner_args: dict[str, Any] = field(default_factory=dict)
    direction: str = "minimize"  # of the config's optimized_metric
    n_trials: int = 20
    workers: int = 1  # jobs at a time; the machine's threads are divided between them
    storage: str | None = None  # default: SWEEP_DIR/optuna.journal; or an Optuna storage URL
    study_name: str | None = None  # default: the sweep directory's name
    max_failure_rate: float = 0.0  # more failed jobs than this fraction: exit non-zero


@dataclass
class XfmrLauncherConf:
    _target_: str = "hydra_plugins.xfmr_sweeper.plugins.XfmrLauncher"
    # forkserver: each job forked from a server that imported `preload` once (spawn where the
    # platform has no fork server). spawn: a fresh interpreter per job, seconds more each.
    # Not the entry point's module: each job runs it again as its __main__, as spawn does.
    start_method: str = "forkserver"
    preload: list[str] = field(default_factory=lambda: ["torch", "lightning", "xfmr.training.run"])
    # With GPUs, each running job has GPUs of its own (CUDA_VISIBLE_DEVICES); true lets more
    # jobs run at once than there are GPUs, several jobs to a GPU.
    share_gpus: bool = False


ConfigStore.instance().store(
    group="hydra/sweeper", name="xfmr", node=XfmrSweeperConf, provider="xfmr"
)
ConfigStore.instance().store(
    group="hydra/launcher", name="xfmr", node=XfmrLauncherConf, provider="xfmr"
)


class XfmrSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.settings = XfmrSweeperConf(**settings)
        self.hydra_context: Any = None
        self.config: Any = None
        self.launcher: Any = None
        self.checks_jobs = False

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from hydra.core.plugins import Plugins

        from xfmr.api.jobs import is_checked_first
        from xfmr.sweeps.sweep import fix_sweep_dir

        self.hydra_context = hydra_context
        self.config = config
        # xfmr-train's jobs are checked before the sweep starts; another app's are its own.
        self.checks_jobs = is_checked_first(task_function)
        # Before the launcher: submitit's resolves its folder from ${hydra.sweep.dir}, whose
        # default reads the Hydra config that fix_sweep_dir sets.
        fix_sweep_dir(config)
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: Any) -> Any:
        from xfmr.api.jobs import check_first_job
        from xfmr.cli.common import fail
        from xfmr.errors import UserError
        from xfmr.sweeps.sweep import run_sweep

        try:
            if self.checks_jobs:
                check_first_job(self.hydra_context, self.config, self.settings, list(arguments))
            return run_sweep(
                self.settings,
                hydra_context=self.hydra_context,
                config=self.config,
                launcher=self.launcher,
                arguments=arguments,
            )
        except UserError as e:
            fail("xfmr-train", str(e))


class XfmrLauncher(Launcher):
    def __init__(self, **settings: Any) -> None:
        self.settings = XfmrLauncherConf(**settings)
        self.hydra_context: Any = None
        self.task_function: Any = None
        self.config: Any = None
        self.gpu_pool: Any = None  # set by the sweep (xfmr.sweeps.sweep.use_gpus)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from xfmr.cli.common import fail
        from xfmr.sweeps.processes import START_METHODS

        start_method = self.settings.start_method
        if start_method not in START_METHODS:
            fail(
                "xfmr-train",
                f"hydra.launcher.start_method={start_method!r}; valid: {', '.join(START_METHODS)}",
            )
        self.hydra_context = hydra_context
        self.task_function = task_function
        self.config = config

    def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
        from xfmr.sweeps.jobs import launch_job

        return [
            launch_job(
                self.hydra_context,
                self.task_function,
                self.config,
                list(o),
                num,
                start_method=self.settings.start_method,
                preload=tuple(self.settings.preload),
                gpus=self.gpu_pool,
            )
            for num, o in enumerate(job_overrides, start=initial_job_idx)
        ]
