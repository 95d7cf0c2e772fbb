"""Memory growing towards its limit: one definition that `watch` evaluates and `oomguard rules` writes.

    slope    = least-squares slope of `used` over the window          (PromQL: deriv(used[window]))
    growing  = slope > 0 and the slope over the window's older half > 0  (a leak climbs all along; a one-off
                                                                       step leaves the older half flat)
    eta      = (limit - used now) / slope, alerting when eta < horizon  (critical under `critical_s`)

Least squares is what Prometheus' `deriv()` computes, so a replayed series gives the same answer in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oomguard.watch.durations import prom_duration
from oomguard.watch.samples import Series


@dataclass(frozen=True)
class Growth:
    slope: float  # units per second over the whole window
    older_slope: float
    level: float  # the last value
    eta_s: float  # seconds until the limit at this slope
    points: int
    span_s: float


def least_squares_slope(series: Series) -> float | None:
    """Slope of the least-squares line (Prometheus' deriv); None with fewer than two distinct times."""
    n = len(series)
    if n < 2:
        return None
    t0 = series.ts[0]
    mean_t = math.fsum(t - t0 for t in series.ts) / n
    mean_v = math.fsum(series.values) / n
    var = math.fsum((t - t0 - mean_t) ** 2 for t in series.ts)
    if var <= 0:
        return None
    cov = math.fsum((t - t0 - mean_t) * (v - mean_v) for t, v in zip(series.ts, series.values))
    return cov / var


@dataclass(frozen=True)
class GrowthRule:
    window_s: float
    horizon_s: float
    critical_s: float

    def evaluate(self, used: Series, limit: float, now: float) -> Growth | None:
        """The growth of `used` (already cut to the window) towards `limit`, when it alerts; else None."""
        window = used.since(now - self.window_s)
        half = window.until(now - self.window_s / 2)
        slope, older = least_squares_slope(window), least_squares_slope(half)
        if slope is None or older is None or slope <= 0 or older <= 0:
            return None
        eta = max(0.0, (limit - window.last) / slope)
        if eta >= self.horizon_s:
            return None
        return Growth(slope, older, window.last, eta, len(window), window.ts[-1] - window.ts[0])

    def promql(self, headroom: str, used: str) -> str:
        """The same condition over raw selectors: `headroom` is limit - used, `used` a range-able selector.

        `used` must be a raw selector, not a recorded series: a recording rule has no history when the rules
        are first loaded, and the window needs an hour of it."""
        w, half = prom_duration(self.window_s), prom_duration(self.window_s / 2)
        return (
            f"({headroom}) / deriv({used}[{w}]) < {self.horizon_s:g}"
            f" and deriv({used}[{w}]) > 0 and deriv({used}[{half}] offset {half}) > 0"
        )
