"""The watch loop's one step, without printing or sleeping: scrape what is due, store, detect, diff alerts.

`Watcher.tick(now)` is all the CLI calls in its loop; tests call it with replayed time. Alerts are
reported when they appear or change severity, and once more when they clear. The detectors read an
in-memory `Window` updated with each tick's samples (seeded once from the database), and each probe runs
under a deadline, so neither a long history nor a wedged GPU driver can stall a tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from oomguard.watch.deadline import BoundedCaller, StuckCall
from oomguard.watch.detectors import Alert, PendingTrend, Thresholds, evaluate, pending_trends
from oomguard.watch.escape import printable
from oomguard.watch.planned import PlannedCapacity, PlanSource
from oomguard.watch.samples import History, RankKey, Sample, SeriesKey
from oomguard.watch.scrape import ScrapeOutcome, Scraper, up_sample
from oomguard.watch.store import FlushResult, Gap, ScrapeRecord, Store
from oomguard.watch.trend import counter_increase
from oomguard.watch.window import HistoryLoader, Window

log = logging.getLogger(__name__)


class Probe(Protocol):
    target: str

    def sample(self, now: float) -> list[Sample]: ...


PROBE_DEADLINE_S = 5.0  # NVML and /proc answer in milliseconds; this long means the driver is wedged
# Probes whose own target is not a scraped URL record `up` (1 answered, 0 blocked) so `target_down` fires.
REPORTS_UP = ("nvml",)


@dataclass(frozen=True)
class RankStatus:
    """One engine's line in the live view: computed here, only formatted by the view."""

    rank: RankKey
    model: str
    kv_usage: float | None
    running: float | None
    waiting: float | None
    preemptions_window: float | None
    num_gpu_blocks: float | None


@dataclass(frozen=True)
class TargetStatus:
    target: str
    up: bool | None  # None: not scraped yet
    last_error: str
    failures: int
    gaps: tuple[Gap, ...]


@dataclass(frozen=True)
class MemoryStatus:
    """A GPU (NVML) or a host process: used and capacity."""

    subject: str
    used: float
    capacity: float | None


@dataclass(frozen=True)
class TickResult:
    at: float
    outcomes: tuple[ScrapeOutcome, ...]
    flush: FlushResult
    alerts: tuple[Alert, ...]  # everything active now
    new: tuple[Alert, ...]  # appeared or changed severity this tick
    cleared: tuple[Alert, ...]
    ranks: tuple[RankStatus, ...] = ()
    targets: tuple[TargetStatus, ...] = ()
    memory: tuple[MemoryStatus, ...] = ()
    pending: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    trends_pending: tuple[PendingTrend, ...] = ()  # trend detectors still collecting samples
    preemption_window_s: float = 300.0  # what the view's preemption column counts over


def _last(history: History, rank: RankKey, metric: str) -> float | None:
    series = history.get(SeriesKey(rank.target, rank.engine, metric))
    return series.last if series is not None and len(series) else None


class Watcher:
    def __init__(
        self,
        store: Store,
        scraper: Scraper,
        probes: list[Probe] | None = None,
        thresholds: Thresholds | None = None,
        planned: PlannedCapacity | PlanSource | None = None,
        *,
        probe_deadline_s: float = PROBE_DEADLINE_S,
    ) -> None:
        self.store = store
        self.scraper = scraper
        self.probes = probes or []
        self.thresholds = thresholds or Thresholds()
        self.planned = planned
        self.active: dict[tuple[str, str], Alert] = {}
        self.last_outcome: dict[str, ScrapeOutcome] = {}
        self._callers = [BoundedCaller[list[Sample]](p.target, probe_deadline_s) for p in self.probes]
        self.window = Window(self.lookback_s)
        self._history = HistoryLoader()

    @property
    def lookback_s(self) -> float:
        t = self.thresholds
        return max(
            t.leak_window_s,
            t.kv_window_s,
            t.queue_window_s,
            t.preemption_window_s,
            t.imbalance_window_s,
            t.restart_window_s,
        )

    def collect(self, now: float) -> tuple[list[ScrapeOutcome], list[str]]:
        notes: list[str] = []
        outcomes = self.scraper.scrape_due(now)
        for outcome in outcomes:
            self.last_outcome[outcome.target] = outcome
            self._keep([*outcome.samples, up_sample(outcome)])
            self.store.add_scrape(
                ScrapeRecord(
                    outcome.target, outcome.ts, outcome.ok, outcome.duration, outcome.error or outcome.note
                )
            )
            for engine, model in outcome.models.items():
                self.store.add_rank(RankKey(outcome.target, engine), model)
            if not outcome.ok:
                retry = self.scraper.failures(outcome.target)
                log.warning(
                    "scrape %s failed (%s); attempt %d",
                    printable(outcome.target),
                    printable(outcome.error),
                    retry,
                )
            elif outcome.note:
                notes.append(f"{outcome.target}: {outcome.note}")
                log.warning("scrape %s: %s", printable(outcome.target), printable(outcome.note))
        for probe, caller in zip(self.probes, self._callers):
            answered = True
            try:
                self._keep(caller.call(probe.sample, now))
            except StuckCall as err:
                answered = False
                notes.append(str(err))
                log.warning("%s", err)
            except OSError as err:  # /proc races with a dying process: skip this sample, keep watching
                log.warning("%s: %s", probe.target, err)
            if probe.target in REPORTS_UP:
                self._keep([Sample(probe.target, "", "up", now, 1.0 if answered else 0.0)])
        return outcomes, notes

    def _keep(self, samples: list[Sample]) -> None:
        """Buffer for the database and add to the window what passes the store's checks."""
        self.window.add(self.store.add(samples))

    def detect(self, now: float) -> tuple[list[Alert], History]:
        self.window.advance(now)
        history = self.window.history()
        alerts = evaluate(
            history, now, self.thresholds, self.store.ranks(), self.planned, self._history.complete_from
        )
        return alerts, history

    def tick(self, now: float) -> TickResult:
        if not self._history.done(now - self.lookback_s):
            # What an earlier run stored still counts (a restart does not reset trends): read newest first,
            # a bounded slice a tick, so a large history cannot stall the first ticks.
            self._history.load(self.window, self.store, now)
        outcomes, notes = self.collect(now)
        flush = self.store.flush(now)
        alerts, history = self.detect(now)
        new, cleared = self._diff(alerts)
        for alert in new:
            self.store.add_alert(alert.at, alert.detector, alert.subject, alert.severity, alert.summary)
        return TickResult(
            now,
            tuple(outcomes),
            flush,
            tuple(alerts),
            tuple(new),
            tuple(cleared),
            self._ranks(history, now),
            self._targets(),
            self._memory(history),
            self.store.pending,
            tuple(notes),
            tuple(pending_trends(history, now, self.thresholds)),
            self.thresholds.preemption_window_s,
        )

    def _diff(self, alerts: list[Alert]) -> tuple[list[Alert], list[Alert]]:
        current = {a.key: a for a in alerts}
        new = [a for k, a in current.items() if k not in self.active or self.active[k].severity != a.severity]
        cleared = [a for k, a in self.active.items() if k not in current]
        self.active = current
        return new, cleared

    def _ranks(self, history: History, now: float) -> tuple[RankStatus, ...]:
        models = self.store.ranks()
        ranks = sorted({k.rank for k in history if k.metric in ("kv_cache_usage", "requests_running")})
        rows = []
        for rank in ranks:
            preempt = history.get(SeriesKey(rank.target, rank.engine, "preemptions"))
            window = preempt.since(now - self.thresholds.preemption_window_s) if preempt is not None else None
            rows.append(
                RankStatus(
                    rank,
                    models.get(rank, ""),
                    _last(history, rank, "kv_cache_usage"),
                    _last(history, rank, "requests_running"),
                    _last(history, rank, "requests_waiting"),
                    counter_increase(window)[0] if window is not None and len(window) > 1 else None,
                    _last(history, rank, "kv_num_gpu_blocks"),
                )
            )
        return tuple(rows)

    def _targets(self) -> tuple[TargetStatus, ...]:
        rows = []
        for url in self.scraper.urls:
            outcome = self.last_outcome.get(url)
            since = (outcome.ts if outcome is not None else 0.0) - self.lookback_s
            rows.append(
                TargetStatus(
                    url,
                    None if outcome is None else outcome.ok,
                    "" if outcome is None else outcome.error,
                    self.scraper.failures(url),
                    tuple(self.store.gaps(url, since)),
                )
            )
        return tuple(rows)

    def _memory(self, history: History) -> tuple[MemoryStatus, ...]:
        rows = []
        for key in sorted(history):
            if key.metric == "gpu_memory_used_bytes":
                total = _last(history, key.rank, "gpu_memory_total_bytes")
                rows.append(MemoryStatus(f"GPU {key.engine}", history[key].last, total))
            elif key.metric == "cgroup_memory_bytes":
                rows.append(
                    MemoryStatus(
                        f"host {key.target}",
                        history[key].last,
                        _last(history, key.rank, "cgroup_limit_bytes"),
                    )
                )
        return tuple(rows)
