"""Errors that the CLI turns into a clear message and a non-zero exit.

Every error names the bad input and the fix. Raise :class:`PrimebenchError` (or a subclass) for any
problem a user can correct; the CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations


class PrimebenchError(Exception):
    """A user-facing error: what went wrong, with which input, and how to fix it."""

    def __init__(self, message: str, *, fix: str | None = None):
        self.problem = message
        self.fix = fix
        super().__init__(message if fix is None else f"{message}\n  fix: {fix}")


class ConfigError(PrimebenchError):
    """A configuration file or override is invalid."""


class DataError(PrimebenchError):
    """A corpus, tokenizer or dataset cannot be loaded or does not fit."""


class CheckpointError(PrimebenchError):
    """A checkpoint folder is missing, corrupt, or inconsistent."""


class WriteError(PrimebenchError):
    """A file cannot be written (a full disk, a quota, no permission); what was there is unchanged."""


class OfflineError(PrimebenchError):
    """Something needs the network and the network is not available."""


class NumericalError(PrimebenchError):
    """A number that must be finite (a loss, a weight, a metric) is NaN or infinite."""


class Interrupted(PrimebenchError):
    """A run stopped on SIGINT or SIGTERM after saving what it had; ``exit_code`` is 130 or 143."""

    def __init__(self, message: str, *, fix: str | None = None, exit_code: int = 130):
        super().__init__(message, fix=fix)
        self.exit_code = exit_code


class InputError(PrimebenchError, ValueError):
    """A value a user gave (a length, a token range, a config value, a choice) is outside what the code
    accepts. Also a ``ValueError``, so library callers that catch ``ValueError`` keep working."""
