"""The one exception type for a person's mistake (config, data file, checkpoint, CLI argument).

The entry points print its message without a traceback and exit non-zero.
"""


class UserError(ValueError):
    """Bad input from a person: the message names the key or file, the value, and what is valid."""


class RunFailed(Exception):
    """A run that cannot go on (its loss stopped being a number): the message says at which
    step and what to change. The run directory keeps its last good checkpoint."""


class RunInterrupted(Exception):
    """A run stopped by a signal (SIGINT, SIGTERM) or a KeyboardInterrupt after saving its
    state: the message says where, and the command that resumes it (`stopped`: where alone)."""

    stopped: str = ""


class DiskFull(RunFailed):
    """No space left to write a file. Files are written whole or not at all
    (`xfmr.files.atomic_path`), so the previous version of the file is intact."""
