"""The one exception type for a person's mistake (config, data file, checkpoint, CLI argument).

The entry points print its message without a traceback and exit non-zero.
"""


class UserError(ValueError):
    """Bad input from a person: the message names the key or file, the value, and what is valid."""
