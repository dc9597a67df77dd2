"""The LightningModule, optimizers, schedules, callbacks, and the training run itself."""
