"""Errors a user can cause, each rendered as one line with exit code 2.

Core code raises these; only `cli.py` turns them into a message and an exit code.
"""

from __future__ import annotations


class OomguardError(Exception):
    """A problem with the user's input: printed as one line, exit code 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


# An error is one line a person reads: a value quoted in it is cut to this many characters.
MAX_SHOWN_CHARS = 60
# Any message longer than this (a value that escaped `shown`) is cut at the CLI.
MAX_ERROR_CHARS = 2000


def shown(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """`repr(value)` for an error message, cut to `limit` characters with its full length said."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 3]}... ({len(text):,} characters)"


def one_line(message: str) -> str:
    """A message as one line of at most MAX_ERROR_CHARS characters."""
    text = " ".join(message.splitlines())
    if len(text) <= MAX_ERROR_CHARS:
        return text
    return text[: MAX_ERROR_CHARS - 30] + f"... ({len(text):,} characters)"


class UnknownModelError(OomguardError):
    """A model id or path that none of the resolvers could turn into a config."""


class ConfigError(OomguardError):
    """A config.json, YAML or flag value that cannot be read or makes no sense."""


class UnknownGpuError(OomguardError):
    """A GPU name that matches nothing, or several things, in the catalog."""


class ParallelismError(OomguardError):
    """A TP/PP/DP/EP layout that vLLM itself would refuse."""


class InputFormatError(OomguardError):
    """A file (log, trace, metrics, pickle) that cannot be parsed as what it claims to be."""


class UnknownOptionError(OomguardError, TypeError):
    """A keyword the Python API does not know (neither an oomguard option nor the engine's setting)."""
