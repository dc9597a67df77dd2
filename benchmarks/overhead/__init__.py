"""The parts of step_overhead.py, which runs the rows and prints what they measured:
plain_loops (the plain PyTorch loops it measures xfmr-train against, and the setting every row
shares), step_times (the callback that times xfmr-train's steps in its own process), tables
(the tables of the rows) and profiling (--profile's tables)."""
