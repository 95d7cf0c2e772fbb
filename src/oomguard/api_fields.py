"""The fields a caller of the Python API fills, checked on arrival: a wrong type or value is a ConfigError
naming the field (what the CLI's flags get from argparse), never an AttributeError or TypeError from deep
inside the planner."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from oomguard.errors import ConfigError, shown
from oomguard.kinds import Usage


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_command_type(value: Any, name: str = "command") -> None:
    """A launch command: one string as pasted, or an argv of strings."""
    if isinstance(value, str):
        return
    if isinstance(value, Sequence) and all(isinstance(word, str) for word in value):
        return
    raise ConfigError(f"{name} must be a string or a list of strings, got {shown(value)}")


def check_text(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{name} must be a string, got {shown(value)}")


def check_byte_size(value: Any, name: str, *, text_allowed: bool) -> None:
    """Bytes as an int (or a whole finite float) >= 0; "80GiB"-style text where the field parses it."""
    if value is None or (text_allowed and isinstance(value, str)):
        return
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not _is_int(value) or value < 0:
        kind = "a size like 80GiB or bytes" if text_allowed else "a whole number of bytes"
        raise ConfigError(f"{name} must be {kind} >= 0, got {shown(value)}")


def check_count(value: Any, name: str, *, minimum: int = 1, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not _is_int(value) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {shown(value)}")


def as_usage(value: Any) -> Usage:
    """A Usage, or its name as text ("serve", "llm")."""
    if isinstance(value, Usage):
        return value
    for member in Usage:
        if value in (member.value, member.name, member.name.lower()):
            return member
    raise ConfigError(f"usage must be one of {', '.join(m.value for m in Usage)}, got {shown(value)}")


# vLLM measures non-torch memory as a difference between two readings and logs negative values of it
SIGNED_TERMS = frozenset({"non_torch"})


def check_measured(value: Any) -> None:
    """Calibrated terms: term name -> bytes, >= 0 except for SIGNED_TERMS (a negative weights term would make
    room that is not there)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"measured must be a mapping of term -> bytes, got {shown(value)}")
    for term, size in value.items():
        if not isinstance(term, str):
            raise ConfigError(f"measured: term names are strings, got {shown(term)}")
        if not _is_int(size) or (size < 0 and term not in SIGNED_TERMS):
            raise ConfigError(f"measured[{term!r}] must be a whole number of bytes >= 0, got {shown(size)}")


def check_flags(value: Any) -> None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"flags must be a mapping of setting name -> value, got {shown(value)}")
