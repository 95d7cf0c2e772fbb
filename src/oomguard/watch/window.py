"""The detectors' recent history, kept in memory and updated incrementally instead of re-read every tick.

Each tick appends what it scraped and drops what fell out of the lookback, so a tick costs the new samples
plus the detectors, however many hours and ranks the database holds. The window is seeded once at start
from the database (one query), so a restarted watcher judges with the history it had.

Bounded: at most `MAX_SERIES_PER_TARGET` series per target (a label that changes on every scrape would
otherwise grow it without end); past that, the series not seen for longest are dropped from the window
(they stay on disk).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable

from oomguard.watch.samples import Sample, Series, SeriesKey

log = logging.getLogger(__name__)

MAX_SERIES_PER_TARGET = 8192  # 512 DP engines x 16 metrics


class _Points:
    __slots__ = ("cached", "ts", "values")

    def __init__(self) -> None:
        self.ts: list[float] = []
        self.values: list[float] = []
        self.cached: Series | None = None

    def add(self, ts: float, value: float) -> None:
        if not self.ts or ts > self.ts[-1]:
            self.ts.append(ts)
            self.values.append(value)
        else:  # out of order (a replayed or spilled record): keep time order, one value per timestamp
            i = bisect.bisect_left(self.ts, ts)
            if i < len(self.ts) and self.ts[i] == ts:
                self.values[i] = value
            else:
                self.ts.insert(i, ts)
                self.values.insert(i, value)
        self.cached = None

    def drop_before(self, start: float) -> None:
        cut = bisect.bisect_left(self.ts, start)
        if cut:
            del self.ts[:cut], self.values[:cut]
            self.cached = None

    def series(self) -> Series:
        if self.cached is None:
            self.cached = Series(tuple(self.ts), tuple(self.values))
        return self.cached


class Window:
    """Series over the last `lookback_s` seconds, per (target, engine, metric)."""

    def __init__(self, lookback_s: float, max_series_per_target: int = MAX_SERIES_PER_TARGET) -> None:
        self.lookback_s = lookback_s
        self.max_series_per_target = max_series_per_target
        self._points: dict[SeriesKey, _Points] = {}
        self._per_target: dict[str, int] = {}
        self.evicted = 0

    def add(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            points = self._points.get(sample.key)
            if points is None:
                if self._per_target.get(sample.target, 0) >= self.max_series_per_target:
                    self._evict_stalest(sample.target)
                points = self._points[sample.key] = _Points()
                self._per_target[sample.target] = self._per_target.get(sample.target, 0) + 1
            points.add(sample.ts, sample.value)

    def _evict_stalest(self, target: str) -> None:
        keys = [k for k in self._points if k.target == target]
        stalest = min(keys, key=lambda k: self._points[k].ts[-1] if self._points[k].ts else float("-inf"))
        self._remove(stalest)
        self.evicted += 1
        if self.evicted == 1:
            log.warning(
                "%s: more than %d series (a label that changes on every scrape?); the stalest leave the "
                "detectors' window",
                target,
                self.max_series_per_target,
            )

    def _remove(self, key: SeriesKey) -> None:
        del self._points[key]
        self._per_target[key.target] -= 1

    def advance(self, now: float) -> None:
        """Forget what is older than the lookback; series left empty go."""
        start = now - self.lookback_s
        for key in list(self._points):
            points = self._points[key]
            points.drop_before(start)
            if not points.ts:
                self._remove(key)

    def history(self) -> dict[SeriesKey, Series]:
        return {key: points.series() for key, points in self._points.items()}

    def __len__(self) -> int:
        return sum(len(p.ts) for p in self._points.values())
