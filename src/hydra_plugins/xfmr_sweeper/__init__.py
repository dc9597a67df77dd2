"""xfmr's Hydra plugins: the sweeper (grid or Optuna search) and the launcher (a child process
per job). Hydra imports this package at start-up to discover them, so it stays light; the work
is done in `xfmr.sweeps`."""
