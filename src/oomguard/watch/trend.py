"""Robust trend arithmetic over a series: Theil-Sen slope, sustained-rise check, counters across restarts.

Theil-Sen (the median of all pairwise slopes) shrugs off up to ~29% outliers: a GC spike or one odd
scrape does not tilt the line the way least squares would. Pure Python; the series is first reduced to at
most `MAX_POINTS` bucket medians so the O(n^2) pair count stays bounded however long the window.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from dataclasses import dataclass

from oomguard.watch.samples import Series

MAX_POINTS = 240  # 240 points -> 28,680 pairs: a few ms per series


@dataclass(frozen=True)
class Trend:
    slope: float  # units per second
    level: float  # the fitted line's value at the last timestamp
    rising_fraction: float  # share of pairwise slopes > 0 (1.0: every later point is higher)
    start: float
    end: float
    points: int

    @property
    def span(self) -> float:
        return self.end - self.start


def reduce(series: Series, max_points: int = MAX_POINTS) -> Series:
    """At most `max_points` points: medians of equal-count buckets (time and value alike)."""
    n = len(series)
    if n <= max_points:
        return series
    ts: list[float] = []
    values: list[float] = []
    for b in range(max_points):
        lo, hi = b * n // max_points, (b + 1) * n // max_points
        ts.append(statistics.median(series.ts[lo:hi]))
        values.append(statistics.median(series.values[lo:hi]))
    return Series(tuple(ts), tuple(values))


def theil_sen(series: Series) -> Trend | None:
    """Median pairwise slope and the line through the median residual; None with fewer than 3 points."""
    s = reduce(series)
    n = len(s)
    if n < 3 or s.ts[-1] <= s.ts[0]:
        return None
    ts, vs = s.ts, s.values
    slopes: list[float] = []
    for i in range(n - 1):
        ti, vi = ts[i], vs[i]
        slopes += [(vj - vi) / (tj - ti) for tj, vj in zip(ts[i + 1 :], vs[i + 1 :]) if tj > ti]
    if not slopes:
        return None
    slopes.sort()  # once: the median, and the share above zero by bisection
    rising = len(slopes) - bisect.bisect_right(slopes, 0.0)
    half = len(slopes) // 2
    slope = slopes[half] if len(slopes) % 2 else (slopes[half - 1] + slopes[half]) / 2
    intercept = statistics.median(v - slope * t for t, v in zip(s.ts, s.values))
    return Trend(slope, intercept + slope * s.ts[-1], rising / len(slopes), s.ts[0], s.ts[-1], len(series))


def sustained_rise(series: Series, min_fraction: float) -> Trend | None:
    """The trend when the series rises throughout, not by one step: both halves rise, overall slope steady.

    A leak climbs all along; a one-off allocation (a step) leaves each half flat. Both halves must show at
    least a third of the whole window's slope, and most pairwise slopes must be positive.
    """
    whole = theil_sen(series)
    if whole is None or whole.slope <= 0 or whole.rising_fraction < min_fraction:
        return None
    mid = (series.ts[0] + series.ts[-1]) / 2
    first, second = theil_sen(series.until(mid)), theil_sen(series.since(mid))
    if first is None or second is None:
        return None
    if first.slope < whole.slope / 3 or second.slope < whole.slope / 3:
        return None
    return whole


def counter_increase(series: Series) -> tuple[float, list[float]]:
    """Total increase of a counter over the series, counting across resets; and the reset timestamps.

    A counter that goes down was reset (the process restarted): the increase after it counts from zero,
    the way Prometheus' increase() does.
    """
    values = series.values
    if len(values) < 2:
        return 0.0, []
    # where the counter went down; across each reset the increase is the new value, i.e. the plain
    # difference plus the value before the reset
    dropped = [i for i, (prev, cur) in enumerate(itertools.pairwise(values), start=1) if cur < prev]
    total = values[-1] - values[0] + math.fsum(values[i - 1] for i in dropped)
    return total, [series.ts[i] for i in dropped]


def time_to_reach(trend: Trend, limit: float) -> float | None:
    """Seconds from the trend's last point until its line reaches `limit`; None when it never will."""
    if trend.slope <= 0:
        return None
    return max(0.0, (limit - trend.level) / trend.slope)


def recent_level(series: Series, seconds: float) -> float:
    """Median of the last `seconds` of the series: the level now, without one scrape's noise."""
    tail = series.since(series.ts[-1] - seconds)
    return statistics.median(tail.values) if len(tail) else series.last
