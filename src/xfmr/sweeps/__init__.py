"""Sweeps: what grid sweeps and searches share (jobs in child processes, their status,
`sweep.json`), and the Optuna side of a search. Hydra's plugins in `hydra_plugins/xfmr_sweeper`
stay thin and call into here."""
