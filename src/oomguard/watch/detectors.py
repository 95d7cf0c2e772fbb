"""Detectors: pure functions over sample series that say an OOM (or its precursor) is coming, and why.

Each detector reads the series it needs from a `History`, judges against `Thresholds`, and returns
`Alert`s carrying the numbers (evidence) and what to change (fix). No I/O, no clock: `now` is passed in,
so a replayed day of samples is judged exactly as a live one.

The fixes follow the triage guide (shared/seeds/004): KV saturation and queue growth mean arrival or length
exceeds capacity (limit concurrency, lower max-num-seqs, shorter max-model-len, more KV per GPU); a leak is
fixed by a version change or a restart, not by tuning; host memory is not GPU memory.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from oomguard.imbalance import IMBALANCE_MIN_MEAN_KV, IMBALANCE_WARN, IMBALANCE_WINDOW_S, imbalance
from oomguard.units import GiB, MiB
from oomguard.watch.durations import format_duration
from oomguard.watch.growth import GrowthRule
from oomguard.watch.planned import PlannedCapacity, PlanSource
from oomguard.watch.samples import History, RankKey, Series, SeriesKey
from oomguard.watch.trend import (
    counter_increase,
    recent_level,
    sustained_rise,
    time_to_reach,
)

log = logging.getLogger(__name__)

WARNING = "warning"
CRITICAL = "critical"

# Counters whose decrease means the process restarted (prometheus_client counters start at 0).
RESTART_COUNTERS = ("prompt_tokens", "generation_tokens", "preemptions", "requests_finished")
MAX_EVIDENCE = 8  # lines of evidence per alert: enough to check, bounded however many events


@dataclass(frozen=True)
class Thresholds:
    """Every knob the detectors use; the CLI and `oomguard rules` expose the same ones."""

    leak_window_s: float = 3600.0  # look this far back for a memory trend
    leak_min_span_s: float = 600.0  # and need at least this much data before judging
    leak_min_rising: float = 0.7  # share of pairwise slopes that must be positive
    leak_reset_drop: float = 0.05  # a drop by this share of capacity starts a new segment (restart, free)
    steady_load_tolerance: float = 0.25  # token rate may differ this much between halves and count as steady
    horizon_s: float = 6 * 3600.0  # warn when memory runs out sooner than this
    critical_eta_s: float = 3600.0  # and call it critical sooner than this
    kv_window_s: float = 600.0
    kv_high: float = 0.95  # KV usage at which new requests wait or preempt
    kv_horizon_s: float = 900.0  # warn when KV saturates sooner than this
    queue_window_s: float = 300.0
    queue_min_waiting: float = 5.0
    queue_limit: float = 100.0  # time-to-saturation of the queue is measured to this many waiting
    preemption_window_s: float = 300.0
    preemptions_per_min: float = 1.0
    imbalance_window_s: float = IMBALANCE_WINDOW_S
    imbalance: float = IMBALANCE_WARN  # DP ranks more than 15% apart (oomguard.imbalance)
    imbalance_min_kv: float = IMBALANCE_MIN_MEAN_KV  # nearly idle ranks: spread is noise (oomguard.imbalance)
    imbalance_min_requests: float = 2.0
    host_memory_ratio: float = 0.9
    restart_window_s: float = 3600.0

    @property
    def host_growth(self) -> GrowthRule:
        """Host memory growing towards its limit: the same rule `oomguard rules` writes."""
        return GrowthRule(self.leak_window_s, self.horizon_s, self.critical_eta_s)


@dataclass(frozen=True)
class Alert:
    detector: str  # memory_leak | host_memory_growth | kv_saturation | queue_growth | queue_backlog |
    #                preemptions | dp_imbalance | host_memory | restarts | target_down | engine_missing |
    #                kv_pool_shortfall
    severity: str
    subject: str  # what it is about: a rank, a GPU, a host process
    summary: str
    evidence: tuple[str, ...]
    fix: tuple[str, ...]
    at: float
    eta_seconds: float | None = None  # time until the bad thing, when it is a trend
    value: float | None = None  # the number judged (slope, usage, rate, imbalance)
    threshold: float | None = None
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.detector, self.subject

    def as_dict(self) -> dict[str, object]:
        return {
            "at": self.at,
            "detector": self.detector,
            "severity": self.severity,
            "subject": self.subject,
            "summary": self.summary,
            "eta_seconds": self.eta_seconds,
            "value": self.value,
            "threshold": self.threshold,
            "evidence": list(self.evidence),
            "fix": list(self.fix),
            **({"extra": dict(self.extra)} if self.extra else {}),
        }


# ----- helpers over a History ----------------------------------------------------------------------------


def _series(history: History, target: str, engine: str, metric: str, since: float) -> Series | None:
    series = history.get(SeriesKey(target, engine, metric))
    if series is None:
        return None
    window = series.since(since)
    return window if len(window) else None


def _ranks(history: History, metric: str) -> list[RankKey]:
    return sorted({key.rank for key in history if key.metric == metric})


def _mean(series: Series | None) -> float | None:
    return statistics.fmean(series.values) if series is not None and len(series) else None


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:.2f} GiB"


def _per_hour(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 3600 / MiB:.0f} MiB/h"


RESET_CONFIRM_POINTS = 3  # a drop counts as a restart only when this many points on each side agree


def after_last_drop(series: Series, drop: float) -> Series:
    """The part after the last lasting fall by more than `drop` (a restart or a big free).

    Medians of a few points before and after each position are compared, so a single spike (one high
    scrape followed by a normal one) does not cut the window.
    """
    k = RESET_CONFIRM_POINTS
    start = 0
    for i in range(k, len(series) - k + 1):
        before = statistics.median(series.values[i - k : i])
        after = statistics.median(series.values[i : i + k])
        if before - after > drop:
            start = i
    return Series(series.ts[start:], series.values[start:])


def token_rate_change(history: History, start: float, end: float) -> float | None:
    """Relative change of the summed token rate between the window's halves; None when no token counter
    covers both halves (load unknown, not "changed")."""
    mid = (start + end) / 2
    halves = [0.0, 0.0]
    found = False
    for key, series in history.items():
        if key.metric not in ("prompt_tokens", "generation_tokens"):
            continue
        parts = [series.since(start).until(mid), series.since(mid).until(end)]
        if min(len(p) for p in parts) < 2:
            continue
        found = True
        for half, part in enumerate(parts):
            halves[half] += counter_increase(part)[0] / max(part.ts[-1] - part.ts[0], 1e-9)
    if not found:
        return None
    base = max(halves[0], halves[1])
    return 0.0 if base == 0 else abs(halves[1] - halves[0]) / base


# ----- memory leak ---------------------------------------------------------------------------------------

LEAK_FIX = (
    (
        "restart the server before the estimated time to stop the crash, then find the source: memory that "
        "rises at "
        "steady load and falls back after a restart is a leak or allocator fragmentation, not a sizing "
        "problem"
    ),
    (
        "compare against another vLLM version and check its release notes; turn off custom ops, plugins and "
        "non-default flags one at a time (bisect)"
    ),
    "keep watching at fixed load for hours: only a flat curve with zero restarts counts as fixed",
)


def _leak(
    history: History,
    key: SeriesKey,
    capacity: float,
    now: float,
    t: Thresholds,
    what: str,
    capacity_name: str,
) -> Alert | None:
    series = _series(history, key.target, key.engine, key.metric, now - t.leak_window_s)
    if series is None:
        return None
    series = after_last_drop(series, t.leak_reset_drop * capacity)
    if len(series) < 3 or series.ts[-1] - series.ts[0] < t.leak_min_span_s:
        return None
    trend = sustained_rise(series, t.leak_min_rising)
    if trend is None:
        return None
    eta = time_to_reach(trend, capacity)
    if eta is None or eta > t.horizon_s:
        return None
    change = token_rate_change(history, series.ts[0], series.ts[-1])
    if change is not None and change > t.steady_load_tolerance:
        return None  # memory following a changing load is not a leak
    load = (
        f"load steady: token rate changed {change:.0%} between the halves of the window"
        if change is not None
        else "no token counters beside this series: load steadiness not checked"
    )
    subject = str(key.rank)
    return Alert(
        "memory_leak",
        CRITICAL if eta < t.critical_eta_s else WARNING,
        subject,
        f"{what} rises {_per_hour(trend.slope)} at steady load: {capacity_name} exhausted in "
        f"{format_duration(eta)}",
        (
            f"{what} now {_gib(trend.level)} of {_gib(capacity)} ({capacity_name})",
            (
                f"Theil-Sen slope {_per_hour(trend.slope)} over {format_duration(trend.span)} "
                f"({trend.points} samples), "
                f"{trend.rising_fraction:.0%} of pairwise slopes positive, rising in both halves"
            ),
            load,
        ),
        LEAK_FIX,
        now,
        eta,
        trend.slope,
        capacity,
        {"level": trend.level, "capacity": capacity},
    )


HOST_MEMORY_METRICS = {
    "cgroup_memory_bytes": "cgroup memory (working set)",
    "host_rss_bytes": "RSS of the server's process tree",
    "process_rss_bytes": "RSS of the API-server process (/metrics)",
}


def memory_leaks(history: History, now: float, t: Thresholds) -> list[Alert]:
    """GPU memory (NVML) against the device total (host memory: `host_memory_growth`)."""
    alerts: list[Alert] = []
    for key in sorted(history):
        if key.metric == "gpu_memory_used_bytes":
            total = history.get(SeriesKey(key.target, key.engine, "gpu_memory_total_bytes"))
            if total is not None and len(total):
                alert = _leak(history, key, total.last, now, t, "GPU memory used", "device memory")
                if alert:
                    alerts.append(alert)
    return alerts


def host_memory_growth(history: History, now: float, t: Thresholds) -> list[Alert]:
    """Host memory rising towards the cgroup limit, with the time left: `Thresholds.host_growth`, the rule
    `OomguardHostMemoryLeak` evaluates in Prometheus."""
    rule = t.host_growth
    alerts = []
    for key in sorted(k for k in history if k.metric == "cgroup_limit_bytes"):
        limit = history[key].last
        if limit <= 0:
            continue
        found = []  # every host-memory series of this subject that grows towards the limit, soonest first
        for metric in HOST_MEMORY_METRICS:
            used = history.get(SeriesKey(key.target, key.engine, metric))
            window = used.since(now - rule.window_s) if used is not None else None
            if window is None or len(window) < 3 or window.ts[-1] - window.ts[0] < t.leak_min_span_s:
                continue
            growth = rule.evaluate(window, limit, now)
            if growth is not None:
                found.append((growth.eta_s, metric, growth))
        if not found:
            continue
        _, metric, growth = min(found)
        what = HOST_MEMORY_METRICS[metric]
        alerts.append(
            Alert(
                "host_memory_growth",
                CRITICAL if growth.eta_s < rule.critical_s else WARNING,
                str(key.rank),
                f"{what} rises {_per_hour(growth.slope)}: the memory limit is reached in "
                f"{format_duration(growth.eta_s)}",
                (
                    f"{what} now {_gib(growth.level)} of {_gib(limit)} (limit)",
                    (
                        f"least-squares slope {_per_hour(growth.slope)} over "
                        f"{format_duration(growth.span_s)} "
                        f"({growth.points} samples); older half {_per_hour(growth.older_slope)}"
                    ),
                ),
                HOST_FIX,
                now,
                growth.eta_s,
                growth.slope,
                limit,
                {"level": growth.level, "limit": limit},
            )
        )
    return alerts


# ----- KV cache saturation and the waiting queue ---------------------------------------------------------

KV_FIX = (
    (
        "limit concurrency at the gateway (max in-flight requests) or lower --max-num-seqs so the KV cache "
        "is "
        "not oversubscribed; cap max_tokens and input length at the gateway"
    ),
    (
        "give KV more room per GPU: --kv-cache-dtype fp8, a shorter --max-model-len, a slightly higher "
        "--gpu-memory-utilization if the startup ledger leaves headroom, or more tensor parallelism"
    ),
    "add replicas when the arrival rate, not single requests, exceeds capacity",
)


def _kv_context(history: History, rank: RankKey, since: float) -> list[str]:
    lines = []
    blocks = _series(history, rank.target, rank.engine, "kv_num_gpu_blocks", 0.0)
    kv = _series(history, rank.target, rank.engine, "kv_cache_usage", since)
    if blocks is not None and kv is not None:
        num_blocks = blocks.last
        block_size = _series(history, rank.target, rank.engine, "kv_block_size", 0.0)
        free = max(0.0, (1 - kv.last) * (num_blocks - 1))  # vLLM: usage = 1 - free/(num_blocks - 1)
        size = f" x {block_size.last:.0f} tokens" if block_size is not None else ""
        lines.append(f"KV pool {num_blocks:.0f} blocks{size} (cache_config_info), about {free:.0f} free")
    waiting = _series(history, rank.target, rank.engine, "requests_waiting", since)
    running = _series(history, rank.target, rank.engine, "requests_running", since)
    if running is not None and waiting is not None:
        lines.append(f"running {running.last:.0f}, waiting {waiting.last:.0f}")
    return lines


def kv_saturation(history: History, now: float, t: Thresholds) -> list[Alert]:
    alerts = []
    for rank in _ranks(history, "kv_cache_usage"):
        kv = _series(history, rank.target, rank.engine, "kv_cache_usage", now - t.kv_window_s)
        if kv is None:
            continue
        level = recent_level(kv, max(t.kv_window_s / 20, 1.0))  # one sample is enough to be full
        context = _kv_context(history, rank, now - t.kv_window_s)
        if level >= t.kv_high:
            alerts.append(
                Alert(
                    "kv_saturation",
                    WARNING,
                    str(rank),
                    f"KV cache {level:.0%} full: requests wait or are preempted",
                    (f"KV usage {level:.1%} >= {t.kv_high:.0%}", *context),
                    KV_FIX,
                    now,
                    0.0,
                    level,
                    t.kv_high,
                )
            )
            continue
        trend = sustained_rise(kv, 0.6) if len(kv) >= TREND_MIN_SAMPLES else None
        if trend is None:
            continue
        eta = time_to_reach(trend, t.kv_high)
        if eta is None or eta > t.kv_horizon_s:
            continue
        alerts.append(
            Alert(
                "kv_saturation",
                WARNING,
                str(rank),
                f"KV cache {level:.0%} and rising {trend.slope * 60:.1%}/min: full in {format_duration(eta)}",
                (
                    f"Theil-Sen slope {trend.slope * 3600:.0%} per hour over {format_duration(trend.span)}",
                    *context,
                ),
                KV_FIX,
                now,
                eta,
                trend.slope,
                t.kv_high,
            )
        )
    return alerts


# Usage hovers just under the full mark while admission waits for blocks: within 5% of kv_high is "full".
KV_BOUND_MARGIN = 0.95


def queue_growth(history: History, now: float, t: Thresholds) -> list[Alert]:
    alerts = []
    for rank in _ranks(history, "requests_waiting"):
        waiting = _series(history, rank.target, rank.engine, "requests_waiting", now - t.queue_window_s)
        if waiting is None:
            continue
        level = recent_level(waiting, max(t.queue_window_s / 20, 1.0))
        kv = _series(history, rank.target, rank.engine, "kv_cache_usage", now - t.queue_window_s)
        kv_level = recent_level(kv, t.queue_window_s / 10) if kv is not None else None
        trend = sustained_rise(waiting, 0.6) if len(waiting) >= TREND_MIN_SAMPLES else None
        if trend is None or level < t.queue_min_waiting:
            backlog = _queue_backlog(history, rank, now, t, level, kv_level)
            if backlog is not None:
                alerts.append(backlog)
            continue
        eta = time_to_reach(trend, t.queue_limit)
        fix: tuple[str, ...]
        if kv_level is not None and kv_level >= t.kv_high * KV_BOUND_MARGIN:
            cause = f"KV-bound: KV cache {kv_level:.0%} full, admission waits for free blocks"
            fix = KV_FIX
        else:
            cause = (
                "not KV-bound"
                + (f" (KV {kv_level:.0%})" if kv_level is not None else "")
                + ": the scheduler's max-num-seqs / max-num-batched-tokens or compute is the limit"
            )
            fix = (
                "arrival rate exceeds what the engine serves: add replicas or throttle at the gateway",
                "if KV has room, a higher --max-num-seqs admits more at once (re-plan: it raises peak "  # noqa: ISC004
                "memory)",
            )
        alerts.append(
            Alert(
                "queue_growth",
                WARNING,
                str(rank),
                f"waiting queue {level:.0f} and growing {trend.slope * 60:.1f}/min"
                + (f": {t.queue_limit:.0f} waiting in {format_duration(eta)}" if eta else ""),
                (
                    f"Theil-Sen slope {trend.slope * 60:.2f} requests/min over {format_duration(trend.span)}",
                    cause,
                    *_kv_context(history, rank, now - t.queue_window_s),
                ),
                fix,
                now,
                eta,
                trend.slope,
                t.queue_min_waiting,
            )
        )
    return alerts


def _queue_backlog(
    history: History, rank: RankKey, now: float, t: Thresholds, level: float, kv_level: float | None
) -> Alert | None:
    """A level, judged on one sample: the queue at its limit, or waiting for KV blocks (the cache full)."""
    kv_bound = kv_level is not None and kv_level >= t.kv_high * KV_BOUND_MARGIN
    if not (level >= t.queue_limit or (level >= t.queue_min_waiting and kv_bound)):
        return None
    cause = (
        f"KV-bound: KV cache {kv_level:.0%} full, admission waits for free blocks"
        if kv_bound and kv_level is not None
        else f"at least {t.queue_limit:.0f} waiting"
    )
    return Alert(
        "queue_backlog",
        WARNING,
        str(rank),
        f"{level:.0f} requests waiting ({cause.split(':')[0]})",
        (cause, *_kv_context(history, rank, now - t.queue_window_s)),
        KV_FIX if kv_bound else ("arrival rate exceeds what the engine serves: add replicas or throttle",),
        now,
        None,
        level,
        t.queue_min_waiting if kv_bound else t.queue_limit,
    )


# ----- preemptions -----------------------------------------------------------------------------------------


def preemptions(history: History, now: float, t: Thresholds) -> list[Alert]:
    alerts = []
    for rank in _ranks(history, "preemptions"):
        counter = _series(history, rank.target, rank.engine, "preemptions", now - t.preemption_window_s)
        if counter is None:
            continue
        judged = _preemption_rate(history, rank, counter, t)
        if judged is None:
            continue
        increase, minutes, basis = judged
        rate = increase / minutes
        if rate < t.preemptions_per_min:
            continue
        kv = _series(history, rank.target, rank.engine, "kv_cache_usage", now - t.preemption_window_s)
        alerts.append(
            Alert(
                "preemptions",
                WARNING,
                str(rank),
                f"{increase:.0f} preemptions {basis} ({rate:.1f}/min): the KV cache is oversubscribed",
                (
                    f"vllm:num_preemptions rose by {increase:.0f} {basis}",
                    *([f"KV usage peaked at {max(kv.values):.0%}"] if kv is not None else []),
                    *_kv_context(history, rank, now - t.preemption_window_s),
                ),
                (
                    (
                        "preempted requests are recomputed: raising concurrency further only adds churn; "
                        "lower --max-num-seqs "
                        "or --max-num-batched-tokens, or limit concurrency at the gateway"
                    ),
                    *KV_FIX[1:],
                ),
                now,
                None,
                rate,
                t.preemptions_per_min,
            )
        )
    return alerts


def _preemption_rate(
    history: History, rank: RankKey, counter: Series, t: Thresholds
) -> tuple[float, float, str] | None:
    """(increase, minutes, what they span). Two samples: the increase between them. One sample (a fresh
    database): the counter since the process started, when its start time is known; else the counter
    itself, judged as if it all happened within one window (a counter that high is a jump either way)."""
    if len(counter) >= 2:
        increase, _ = counter_increase(counter)
        span = counter.ts[-1] - counter.ts[0]
        return increase, max(span / 60, 1e-9), f"in {format_duration(span)}"
    started = _series(history, rank.target, "", "process_start_time", 0.0)
    if started is not None and 0 < counter.ts[-1] - started.last:
        uptime = counter.ts[-1] - started.last
        return counter.last, max(uptime / 60, 1e-9), f"since the server started {format_duration(uptime)} ago"
    return counter.last, t.preemption_window_s / 60, "since the server started (counter; start time unknown)"


# ----- data-parallel imbalance -----------------------------------------------------------------------------


def dp_imbalance(history: History, now: float, t: Thresholds, models: Mapping[RankKey, str]) -> list[Alert]:
    """Ranks serving the same model whose KV usage or load differ by more than `imbalance` of their mean."""
    since = now - t.imbalance_window_s
    groups: dict[str, list[RankKey]] = {}
    for rank in _ranks(history, "kv_cache_usage") or _ranks(history, "requests_running"):
        groups.setdefault(models.get(rank, ""), []).append(rank)
    alerts = []
    for model, ranks in sorted(groups.items()):
        if len(ranks) < 2:
            continue
        checks = []
        kv = {r: _mean(_series(history, r.target, r.engine, "kv_cache_usage", since)) for r in ranks}
        if all(v is not None for v in kv.values()):
            checks.append(
                (
                    "KV usage",
                    {r: float(v) for r, v in kv.items() if v is not None},
                    t.imbalance_min_kv,
                    "{:.0%}",
                )
            )
        load: dict[RankKey, float] = {}
        for r in ranks:
            running = _mean(_series(history, r.target, r.engine, "requests_running", since))
            waiting = _mean(_series(history, r.target, r.engine, "requests_waiting", since))
            if running is not None:
                load[r] = running + (waiting or 0.0)
        if len(load) == len(ranks):
            checks.append(("requests (running + waiting)", load, t.imbalance_min_requests, "{:.1f}"))
        worst = None
        for name, values, floor, fmt in checks:
            mean = statistics.fmean(values.values())
            if mean < floor:
                continue
            spread = imbalance(list(values.values()))  # (max - min) / mean, as simulate and the rule
            if spread > t.imbalance and (worst is None or spread > worst[0]):
                worst = (spread, name, values, fmt)
        if worst is None:
            continue
        spread, name, values, fmt = worst
        hot = max(values, key=values.__getitem__)
        alerts.append(
            Alert(
                "dp_imbalance",
                WARNING,
                model or "all watched ranks",
                f"{name} differs {spread:.0%} across {len(ranks)} ranks (> {t.imbalance:.0%}): {hot} runs "
                "hottest",
                tuple(f"{r}: {fmt.format(v)}" for r, v in sorted(values.items()))
                + (f"(max - min) / mean over the last {format_duration(t.imbalance_window_s)}",),
                (
                    (
                        "check what routes requests to the ranks: sticky sessions or prefix-affinity routing "
                        "pile long "
                        "requests on one rank; prefer least-outstanding-requests balancing"
                    ),
                    "the hottest rank saturates and preempts first: size KV (and alerts) for it, not for the "  # noqa: ISC004
                    "average",
                    "cap max_tokens and input length so one long request cannot pin a rank",
                ),
                now,
                None,
                spread,
                t.imbalance,
                {"ranks": float(len(ranks))},
            )
        )
    return alerts


# ----- host memory -----------------------------------------------------------------------------------------

HOST_FIX = (
    "this is host (container) memory, not GPU memory: exit code 137 / OOMKilled follows when it reaches the "  # noqa: ISC004
    "limit",
    (
        "raise the container's memory limit, or cut host memory: fewer replicas per node, serialized model "
        "loading, "
        "less --swap-space / CPU offload, fewer API-server processes"
    ),
)


def host_memory(history: History, now: float, t: Thresholds) -> list[Alert]:
    alerts = []
    for key in sorted(k for k in history if k.metric == "cgroup_limit_bytes"):
        limit = history[key].last
        used = _series(
            history, key.target, key.engine, "cgroup_memory_bytes", now - t.leak_window_s
        ) or _series(history, key.target, key.engine, "host_rss_bytes", now - t.leak_window_s)
        subject = str(key.rank)
        kills = _series(history, key.target, key.engine, "oom_kills", now - t.restart_window_s)
        if kills is not None and len(kills) >= 2:
            killed, _ = counter_increase(kills)
            if killed > 0:
                alerts.append(
                    Alert(
                        "host_memory",
                        CRITICAL,
                        subject,
                        f"the OOM killer fired {killed:.0f} time(s) in this cgroup",
                        (
                            (
                                f"memory.events oom_kill rose by {killed:.0f} in the last "
                                f"{format_duration(kills.ts[-1] - kills.ts[0])}"
                            ),
                        ),
                        HOST_FIX,
                        now,
                        0.0,
                        killed,
                        0.0,
                    )
                )
        if used is None or limit <= 0:
            continue
        level = recent_level(used, 30.0)
        ratio = level / limit
        if ratio >= t.host_memory_ratio:
            alerts.append(
                Alert(
                    "host_memory",
                    CRITICAL if ratio >= (1 + t.host_memory_ratio) / 2 else WARNING,
                    subject,
                    f"host memory {ratio:.0%} of the limit ({_gib(level)} of {_gib(limit)})",
                    (f"memory now {_gib(level)}, limit {_gib(limit)}",),
                    HOST_FIX,
                    now,
                    None,
                    ratio,
                    t.host_memory_ratio,
                )
            )
    return alerts


# ----- restarts
# ----------------------------------------------------------------------------------------------


def restarts(history: History, now: float, t: Thresholds) -> list[Alert]:
    """Counter resets and a changed process start time; failed scrapes (`up` 0) around them as context."""
    since = now - t.restart_window_s
    by_target: dict[str, set[float]] = {}
    evidence: dict[str, list[str]] = {}
    for key, series in history.items():
        window = series.since(since)
        if len(window) < 2:
            continue
        if key.metric in RESTART_COUNTERS:
            _, resets = counter_increase(window)
            if not resets:
                continue
            by_target.setdefault(key.target, set()).update(resets)
            lines = evidence.setdefault(key.target, [])
            lines += [f"{key.metric} counter reset at {ts:.0f}" for ts in resets[: MAX_EVIDENCE - len(lines)]]
        elif key.metric in ("process_start_time", "host_process_start_time"):
            for i in range(1, len(window)):
                if abs(window.values[i] - window.values[i - 1]) > 1.0:
                    by_target.setdefault(key.target, set()).add(window.ts[i])
                    evidence.setdefault(key.target, []).append(
                        f"process start time changed to {window.values[i]:.0f} (seen at {window.ts[i]:.0f})"
                    )
    alerts = []
    for target, times in sorted(by_target.items()):
        # Resets seen within one scrape interval of each other are one restart.
        merged: list[float] = []
        for ts in sorted(times):
            if not merged or ts - merged[-1] > 1.0:
                merged.append(ts)
        up = _series(history, target, "", "up", since)
        down = sum(1 for v in up.values if v == 0) if up is not None else 0
        alerts.append(
            Alert(
                "restarts",
                CRITICAL if len(merged) > 1 else WARNING,
                target,
                f"the server restarted {len(merged)} time(s) in the last "
                f"{format_duration(t.restart_window_s)}",
                tuple(dict.fromkeys(evidence[target]))
                + ((f"{down} failed scrape(s) in the window",) if down else ()),
                (
                    (
                        "find why it died before tuning anything: `oomguard diagnose` on its last log, dmesg "
                        "and "
                        "kubectl describe (CUDA OOM traceback vs exit 137 / OOMKilled)"
                    ),
                    "a restart that hides a leak resets the curve: watch the memory trend after each one",
                ),
                now,
                None,
                float(len(merged)),
                0.0,
                {"last_restart": merged[-1]},
            )
        )
    return alerts


def targets_down(history: History, now: float, t: Thresholds) -> list[Alert]:
    """Endpoints whose latest scrapes failed: a dead server cannot warn about anything else."""
    alerts = []
    for key in sorted(k for k in history if k.metric == "up"):
        series = history[key].since(now - t.restart_window_s)
        if not len(series) or series.last != 0:
            continue
        failed = 0
        for value in reversed(series.values):
            if value != 0:
                break
            failed += 1
        since = series.ts[len(series) - failed]
        last_good = "none in the window" if failed == len(series) else f"{series.ts[-failed - 1]:.0f}"
        alerts.append(
            Alert(
                "target_down",
                WARNING,
                key.target,
                f"not answering for {format_duration(now - since)} ({failed} failed scrape(s))",
                (f"last good scrape: {last_good}",),
                (
                    (
                        "check the server and its logs: if it died, `oomguard diagnose` on its last log, "
                        "dmesg and "
                        "kubectl describe says whether it ran out of GPU or host memory"
                    ),
                ),
                now,
                None,
                float(failed),
                0.0,
                {"down_since": since},
            )
        )
    return alerts


def engines_missing(history: History, now: float, t: Thresholds) -> list[Alert]:
    """DP engines that an endpoint served within the restart window but not in its latest good scrape."""
    alerts = []
    for key in sorted(k for k in history if k.metric == "up" and k.engine == ""):
        up = history[key]
        good = [ts for ts, v in zip(up.ts, up.values) if v == 1.0]
        if not good:
            continue
        latest = good[-1]
        for rank in _ranks(history, "requests_running"):
            if rank.target != key.target:
                continue
            running = history[SeriesKey(rank.target, rank.engine, "requests_running")]
            last_seen = running.ts[-1]
            if last_seen >= latest or last_seen < now - t.restart_window_s:
                continue
            alerts.append(
                Alert(
                    "engine_missing",
                    WARNING,
                    str(rank),
                    f"engine no longer in /metrics (last seen {format_duration(latest - last_seen)} before "
                    "the latest scrape)",
                    (f"last sample at {last_seen:.0f}; latest good scrape of the endpoint at {latest:.0f}",),
                    (
                        (
                            "a data-parallel engine that died takes its share of the KV cache with it: check "
                            "the "
                            "engine core's log (`oomguard diagnose`) and whether the API server still routes "
                            "to it"
                        ),
                    ),
                    now,
                    None,
                    latest - last_seen,
                    0.0,
                    {"last_seen": last_seen},
                )
            )
    return alerts


@dataclass(frozen=True)
class PendingTrend:
    """A trend detector that cannot judge yet: how many samples it has and how many it needs."""

    detector: str
    subject: str
    have: int
    need: int

    def as_dict(self) -> dict[str, object]:
        return {"detector": self.detector, "subject": self.subject, "have": self.have, "need": self.need}


TREND_MIN_SAMPLES = 3  # a Theil-Sen line and its halves need three points


def _needed_for_span(series: Series, span_s: float) -> int:
    """Samples needed to cover `span_s` at the series' own scrape interval (at least TREND_MIN_SAMPLES)."""
    if len(series) < 2:
        return TREND_MIN_SAMPLES
    step = (series.ts[-1] - series.ts[0]) / (len(series) - 1)
    return max(TREND_MIN_SAMPLES, int(span_s / step) + 1) if step > 0 else TREND_MIN_SAMPLES


def pending_trends(history: History, now: float, t: Thresholds) -> list[PendingTrend]:
    """Trend detectors still collecting samples, per subject: the level detectors judge one sample, these
    cannot, and say so instead of staying silent."""
    out = []
    checks = (
        ("kv_saturation", "kv_cache_usage", t.kv_window_s, 0.0),
        ("queue_growth", "requests_waiting", t.queue_window_s, 0.0),
        ("memory_leak", "gpu_memory_used_bytes", t.leak_window_s, t.leak_min_span_s),
        ("host_memory_growth", "cgroup_memory_bytes", t.leak_window_s, t.leak_min_span_s),
        ("host_memory_growth", "host_rss_bytes", t.leak_window_s, t.leak_min_span_s),
    )
    for detector, metric, window_s, span_s in checks:
        for key in sorted(k for k in history if k.metric == metric):
            window = history[key].since(now - window_s)
            need = _needed_for_span(window, span_s) if span_s else TREND_MIN_SAMPLES
            if len(window) < need:
                out.append(PendingTrend(detector, str(key.rank), len(window), need))
    return out


# A server may legitimately get a few blocks less than planned (allocator rounding, driver versions); a
# shortfall beyond this share means memory the plan did not count.
KV_POOL_SHORTFALL = 0.05


def kv_pool_shortfall(history: History, now: float, planned: PlannedCapacity) -> list[Alert]:
    """Engines that report (cache_config_info) clearly fewer KV blocks than the plan of their command."""
    alerts = []
    for rank in _ranks(history, "kv_num_gpu_blocks"):
        blocks = history[SeriesKey(rank.target, rank.engine, "kv_num_gpu_blocks")].last
        short = 1 - blocks / planned.num_gpu_blocks if planned.num_gpu_blocks else 0.0
        if short <= KV_POOL_SHORTFALL:
            continue
        alerts.append(
            Alert(
                "kv_pool_shortfall",
                WARNING,
                str(rank),
                f"{blocks:.0f} KV blocks, {short:.0%} fewer than planned ({planned.num_gpu_blocks}): memory "
                "went "
                "somewhere the plan did not count",
                (
                    f"cache_config_info num_gpu_blocks = {blocks:.0f}",
                    (
                        f"oomguard plan of `{planned.command}` on {planned.gpu_name}: "
                        f"{planned.num_gpu_blocks} blocks of "
                        f"{planned.block_size} tokens"
                    ),
                    *((planned.utilization_note,) if planned.utilization_note else ()),
                ),
                (
                    "check the GPU for other processes (nvidia-smi --query-compute-apps) before vLLM starts",
                    (
                        "compare vLLM's startup log ledger with `oomguard plan` (weights, activation peak, "
                        "non-torch, CUDA "
                        "graphs): the larger line is where the memory went"
                    ),
                    "with less KV than planned, saturation and preemption come earlier: re-plan concurrency",
                ),
                now,
                None,
                short,
                KV_POOL_SHORTFALL,
                {"planned_blocks": float(planned.num_gpu_blocks)},
            )
        )
    return alerts


def reported_utilization(history: History) -> float | None:
    """vLLM's gpu_memory_utilization as the server reports it (cache_config_info), if any engine does."""
    for key in sorted(k for k in history if k.metric == "gpu_memory_utilization"):
        return history[key].last
    return None


def evaluate(
    history: History,
    now: float,
    thresholds: Thresholds | None = None,
    models: Mapping[RankKey, str] | None = None,
    planned: PlannedCapacity | PlanSource | None = None,
    history_from: float = -math.inf,
) -> list[Alert]:
    """Every detector over one history, most urgent first.

    `history_from`: the history is complete only from then on (a restarted watcher still reading what it
    stored); a detector whose window reaches further back waits, rather than judge a part of its window.
    A detector that fails on odd numbers (an overflow in a mean of huge values) costs its own alerts for
    this tick, logged, never the watcher: the next tick judges again."""
    t = thresholds or Thresholds()
    runs: list[tuple[str, float, Callable[[], list[Alert]]]] = [
        ("memory_leak", t.leak_window_s, lambda: memory_leaks(history, now, t)),
        ("host_memory", max(t.leak_window_s, t.restart_window_s), lambda: host_memory(history, now, t)),
        ("host_memory_growth", t.leak_window_s, lambda: host_memory_growth(history, now, t)),
        ("kv_saturation", t.kv_window_s, lambda: kv_saturation(history, now, t)),
        ("queue_growth", t.queue_window_s, lambda: queue_growth(history, now, t)),
        ("preemptions", t.preemption_window_s, lambda: preemptions(history, now, t)),
        ("dp_imbalance", t.imbalance_window_s, lambda: dp_imbalance(history, now, t, models or {})),
        ("restarts", t.restart_window_s, lambda: restarts(history, now, t)),
        ("target_down", t.restart_window_s, lambda: targets_down(history, now, t)),
        ("engine_missing", t.restart_window_s, lambda: engines_missing(history, now, t)),
    ]
    if planned is not None:
        plan = (
            planned.for_reported(reported_utilization(history))
            if isinstance(planned, PlanSource)
            else planned
        )
        runs.append(("kv_pool_shortfall", 0.0, lambda: kv_pool_shortfall(history, now, plan)))
    alerts: list[Alert] = []
    for name, window_s, run in runs:
        if now - window_s < history_from:
            continue
        try:
            alerts += run()
        except (ArithmeticError, ValueError, statistics.StatisticsError) as err:
            log.warning("detector %s skipped this tick: %s: %s", name, type(err).__name__, err)
    return sorted(alerts, key=_urgency)


def _urgency(alert: Alert) -> tuple[int, float]:
    eta = alert.eta_seconds if alert.eta_seconds is not None else float("inf")
    return (0 if alert.severity == CRITICAL else 1, eta)
