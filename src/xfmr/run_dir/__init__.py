"""The run directory, written down once: its files, its checkpoints (read safely) and its lock.

Training writes a run directory; everything that uses a finished run reads it; both go
through these modules.
"""
