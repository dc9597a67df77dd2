"""Training a run: the LightningModule, optimizers, schedules, callbacks, guards, loggers,
and `run_training(cfg)` itself."""
