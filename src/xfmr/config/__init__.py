"""A run's configuration: the composed config read once into a typed, frozen `RunConfig`
(`make.run_config`), or read back from a run directory's config.yaml (`RunConfig.read`).

run.py      RunConfig: the sections held together, written as config.yaml and read back
make.py     the order of the checks: each section's own, then what they ask of each other,
            then what the run chooses itself (precision, warm-up, loader workers)
origins.py  which config file set a value the person did not type (for the refusals)
trainer.py  optim.py  options.py
            the sections the training layer reads (Lightning's Trainer, the optimizer and
            schedule, compile, throughput, nonfinite, finetune, slurm, loggers, callbacks);
            the others are beside the layers that read them: model (xfmr.nn.config), data
            (xfmr.data.config), tokenizer (xfmr.text.tokenizers), objective
            (xfmr.objectives.config), trial (xfmr.sweeps.trial)
"""

from xfmr.config.run import PathsConfig, RunConfig

__all__ = ["PathsConfig", "RunConfig"]
