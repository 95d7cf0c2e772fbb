"""Bytes <-> human units, in one place.

vLLM prints GiB (2**30) everywhere, even where its text says "GB"; so does nvidia-smi's "MiB".
A bare number given to a memory option is read as GiB, the unit every vLLM log line uses.
"""

from __future__ import annotations

import math
import re

from oomguard.errors import ConfigError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_UNITS = {
    "": GiB,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GiB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": TiB,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str, *, bare_unit: int = GiB) -> int:
    """'79.19GiB' -> 85_029_158_912 (rounded to a byte); '80GB' is decimal; a bare number is `bare_unit`."""
    match = _SIZE.match(str(text))
    if not match:
        raise ConfigError(f"cannot read {text!r} as a memory size (try e.g. 79.19GiB or 81559MiB)")
    value, unit = float(match.group(1)), match.group(2).lower()
    if not math.isfinite(value):
        raise ConfigError(f"cannot read {text!r} as a memory size: not a finite number")
    if unit not in _UNITS:
        raise ConfigError(f"unknown memory unit {match.group(2)!r} in {text!r} (use B, MiB, GiB, MB, GB ...)")
    scale = bare_unit if unit == "" else _UNITS[unit]
    return round(value * scale)


def gib(num_bytes: float) -> float:
    """Bytes to GiB as a float."""
    return num_bytes / GiB


def format_gib(num_bytes: float, digits: int = 2) -> str:
    """'14.99 GiB' style, the way people read vLLM logs."""
    return f"{num_bytes / GiB:.{digits}f} GiB"
