"""Durations as people and Prometheus write them: '90s', '15m', '2h', '1h30m', '7d'."""

from __future__ import annotations

import math
import re

from oomguard.errors import ConfigError

_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"([0-9]*\.?[0-9]+)(ms|s|m|h|d|w)")


def parse_duration(text: str) -> float:
    """'1h30m' -> 5400.0; a bare number is seconds."""
    raw = str(text).strip().lower()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        if not (math.isfinite(seconds) and seconds >= 0):  # 'nan', 'inf', '-5': no interval means that
            raise ConfigError(f"a duration must be a finite number of seconds >= 0, got {text!r}")
        return seconds
    pos, total = 0, 0.0
    while pos < len(raw):
        match = _PART.match(raw, pos)
        if match is None:
            raise ConfigError(f"cannot read {text!r} as a duration (try 90s, 15m, 2h, 1h30m)")
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if not raw:
        raise ConfigError("empty duration")
    if not math.isfinite(total):
        raise ConfigError(f"cannot read {text!r} as a duration: too long")
    return total


def prom_duration(seconds: float) -> str:
    """A Prometheus duration literal: 5400 -> '1h30m', 90 -> '1m30s', 0.5 -> '500ms'."""
    ms = round(seconds * 1000)
    if ms <= 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400_000), ("h", 3600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def format_duration(seconds: float) -> str:
    """For people: '3 h 10 min', '45 min', '40 s', '2 d 4 h'."""
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(s // 3600, 24)
    return f"{d} d {h} h" if h else f"{d} d"
