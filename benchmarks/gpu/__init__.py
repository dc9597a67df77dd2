"""The parts of gpu_shakespeare.py, which runs xfmr-train and nanoGPT and profiles a step:
report (the rows as measured, the goals they meet, the tables)."""
