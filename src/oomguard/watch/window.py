"""The detectors' recent history, kept in memory and updated incrementally instead of re-read every tick.

Each tick appends what it scraped and drops what fell out of the lookback, so a tick costs the new samples
plus the detectors, however many hours and ranks the database holds. The window is seeded from the database,
so a restarted watcher judges with the history it had: newest first, at most `SEED_ROWS_PER_TICK` stored
samples a tick (`HistoryLoader`), so even the first tick is bounded (an hour of 256 ranks is 1.66M samples,
read over the first ticks; a deployment of a few ranks is read whole in the first).

Bounded: at most `MAX_SERIES_PER_TARGET` series per target (a label that changes on every scrape would
otherwise grow it without end); past that, the series not seen for longest are dropped from the window
(they stay on disk).
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Iterator
from typing import Protocol

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

    def seed(self, series: dict[SeriesKey, tuple[list[float], list[float]]]) -> None:
        """Start from stored series (each in time order), before any live sample."""
        for key, (ts, values) in series.items():
            if not ts:
                continue
            if key in self._points:
                self.add(Sample(key.target, key.engine, key.metric, t, v) for t, v in zip(ts, values))
                continue
            if self._per_target.get(key.target, 0) >= self.max_series_per_target:
                self._evict_stalest(key.target)
            points = self._points[key] = _Points()
            points.ts, points.values = list(ts), list(values)
            self._per_target[key.target] = self._per_target.get(key.target, 0) + 1

    def seed_older(self, key: SeriesKey, ts: list[float], values: list[float]) -> None:
        """Stored points of one series (in time order), older than the ones it holds as a rule: a history
        read newest first, slice by slice."""
        if not ts:
            return
        points = self._points.get(key)
        if points is None:
            if self._per_target.get(key.target, 0) >= self.max_series_per_target:
                self._evict_stalest(key.target)
            points = self._points[key] = _Points()
            self._per_target[key.target] = self._per_target.get(key.target, 0) + 1
        if not points.ts or ts[-1] < points.ts[0]:
            points.ts[:0], points.values[:0] = ts, values
            points.cached = None
        else:  # overlaps what is held (a buffered sample older than the slice): one by one, in order
            for t, v in zip(ts, values):
                points.add(t, v)

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


# Stored samples read into the window per tick while it is seeded: ~0.5 s of CPU (SQLite rows to floats).
SEED_ROWS_PER_TICK = 250_000
FIRST_SLICE_S = 60.0  # the newest minute is read first, and its row rate sizes the next slices


class StoredHistory(Protocol):
    def stored_between(
        self, since: float, until: float
    ) -> Iterator[tuple[SeriesKey, list[float], list[float]]]: ...

    def buffered_since(self, since: float) -> list[Sample]: ...

    def newest_stored(self) -> float | None: ...


class HistoryLoader:
    """Reads a store's history into a window newest first, in time slices sized so that a tick reads about
    `rows_per_tick` samples, until the window's lookback is covered."""

    def __init__(self, rows_per_tick: int = SEED_ROWS_PER_TICK) -> None:
        self.rows_per_tick = rows_per_tick
        self.until = math.inf  # what is older than this is still to read
        self.span = FIRST_SLICE_S
        self.rows = 0
        self.started = False
        self.newest = math.inf  # the newest stored sample's time

    @property
    def complete_from(self) -> float:
        """From when on the window holds the whole stored history (-inf once it is all read)."""
        return self.until if self.until != -math.inf and self.started else -math.inf

    def done(self, start: float) -> bool:
        if self.started and self.until <= start:
            self.until = -math.inf
        return self.until == -math.inf

    def load(self, window: Window, store: StoredHistory, now: float) -> int:
        """Read the next slices (back to `now` - lookback at most); the samples read."""
        start = now - window.lookback_s
        if not self.started:
            self.started = True
            window.add(store.buffered_since(start))  # a spill read back at start is not on disk yet
            newest = store.newest_stored()
            if newest is None:
                self.until = -math.inf  # nothing stored: nothing to read
                return 0
            self.newest = newest
        budget = self.rows_per_tick
        read = 0
        while budget > self.rows_per_tick // 10 and not self.done(start):
            top = min(self.until, self.newest)
            lo = max(start, top - self.span)
            rows = 0
            for key, ts, values in store.stored_between(lo, self.until):
                window.seed_older(key, ts, values)
                rows += len(ts)
            self.until = lo
            budget -= rows
            read += rows
            left = (
                budget if budget > self.rows_per_tick // 10 else self.rows_per_tick
            )  # this tick, or the next
            if rows < self.rows_per_tick // 100 or top <= lo:
                self.span *= 4  # too few rows to size by (a gap, a lone sample): look further back
            else:
                self.span = left * (top - lo) / rows
        self.rows += read
        return read
