"""Training a run: the LightningModule, optimizers, schedules, callbacks, guards, loggers,
and `train(cfg)` itself."""
