"""The one record every source produces and every detector reads: a timestamped value of one series.

A series is (target, engine, metric): `target` is where it came from (a /metrics URL, `nvml`, `host:PID`),
`engine` tells data-parallel engines behind one endpoint apart (vLLM's `engine` label; "" when there is one),
`metric` is one of the canonical names in `METRICS`, whatever the source called it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# The largest magnitude a sample may have: an unsigned 64-bit counter or byte count. Beyond it a value is
# noise (or a fault injected on purpose) and sums of a few of them would overflow to inf.
MAX_ABS_VALUE = float(2**64)
MAX_KEY_CHARS = 1024  # a target URL, an engine label or a metric name longer than this is not a real one


@dataclass(frozen=True, slots=True)
class Sample:
    target: str
    engine: str
    metric: str
    ts: float  # seconds since the epoch
    value: float

    @property
    def key(self) -> SeriesKey:
        return SeriesKey(self.target, self.engine, self.metric)

    def problem(self) -> str:
        """Why this sample cannot be stored ('' when it can): typed, finite, in range, reasonable keys.

        SQLite stores NaN as NULL (refused by `value NOT NULL`), and inf poisons every sum it enters."""
        for name in ("target", "engine", "metric"):
            text = getattr(self, name)
            if not isinstance(text, str):
                return f"{name} is {type(text).__name__}, not text"
            if len(text) > MAX_KEY_CHARS:
                return f"{name} longer than {MAX_KEY_CHARS} characters"
        for name in ("ts", "value"):
            number = getattr(self, name)
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                return f"{name} is {type(number).__name__}, not a number"
            if not math.isfinite(number):
                return f"{name} is {number}"
        if abs(self.value) > MAX_ABS_VALUE:
            return f"value {self.value:g} is out of range"
        if not 0 <= self.ts < 1e11:  # seconds since the epoch: year 1970 to 5138
            return f"timestamp {self.ts:g} is not seconds since the epoch"
        return ""


@dataclass(frozen=True, slots=True, order=True)
class SeriesKey:
    target: str
    engine: str
    metric: str

    @property
    def rank(self) -> RankKey:
        return RankKey(self.target, self.engine)


@dataclass(frozen=True, slots=True, order=True)
class RankKey:
    """One engine: a data-parallel rank or a replica."""

    target: str
    engine: str

    def __str__(self) -> str:
        return f"{self.target} engine {self.engine}" if self.engine else self.target


@dataclass(frozen=True)
class Series:
    """Values of one series in time order."""

    ts: tuple[float, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.ts)

    def since(self, start: float) -> Series:
        first = bisect.bisect_left(self.ts, start)
        return self if first == 0 else Series(self.ts[first:], self.values[first:])

    def until(self, end: float) -> Series:
        stop = bisect.bisect_right(self.ts, end)
        return self if stop == len(self.ts) else Series(self.ts[:stop], self.values[:stop])

    @property
    def last(self) -> float:
        return self.values[-1]


@dataclass(frozen=True)
class MetricDef:
    name: str
    kind: str  # 'gauge' (a level) or 'counter' (monotonic until the process restarts)
    unit: str
    meaning: str


METRICS: dict[str, MetricDef] = {
    m.name: m
    for m in (
        MetricDef("kv_cache_usage", "gauge", "ratio", "fraction of KV-cache blocks in use, 0..1"),
        MetricDef("requests_running", "gauge", "requests", "requests scheduled on the GPU"),
        MetricDef("requests_waiting", "gauge", "requests", "requests queued for admission"),
        MetricDef("preemptions", "counter", "preemptions", "requests preempted since the engine started"),
        MetricDef("prompt_tokens", "counter", "tokens", "prefill tokens processed"),
        MetricDef("generation_tokens", "counter", "tokens", "tokens generated"),
        MetricDef("requests_finished", "counter", "requests", "requests finished, all reasons"),
        MetricDef(
            "kv_num_gpu_blocks", "gauge", "blocks", "KV-cache blocks vLLM allocated (cache_config_info)"
        ),
        MetricDef("kv_block_size", "gauge", "tokens", "tokens per KV block (cache_config_info)"),
        MetricDef(
            "gpu_memory_utilization", "gauge", "ratio", "vLLM's --gpu-memory-utilization (cache_config_info)"
        ),
        MetricDef("process_rss_bytes", "gauge", "bytes", "resident memory of the process serving /metrics"),
        MetricDef("process_start_time", "gauge", "seconds", "start time of the process serving /metrics"),
        MetricDef(
            "host_process_start_time", "gauge", "seconds", "start time of the process found by port or --pid"
        ),
        MetricDef("gpu_memory_used_bytes", "gauge", "bytes", "GPU memory in use, all processes (NVML)"),
        MetricDef("gpu_memory_total_bytes", "gauge", "bytes", "GPU memory of the device (NVML)"),
        MetricDef("host_rss_bytes", "gauge", "bytes", "resident memory of the server's process tree"),
        MetricDef("cgroup_memory_bytes", "gauge", "bytes", "memory charged to the server's cgroup"),
        MetricDef(
            "cgroup_limit_bytes", "gauge", "bytes", "memory limit of the server's cgroup (or host RAM)"
        ),
        MetricDef(
            "oom_kills", "counter", "kills", "OOM kills in the server's cgroup (memory.events oom_kill)"
        ),
        MetricDef("up", "gauge", "bool", "1 when the scrape succeeded, 0 when it failed"),
    )
}


History = Mapping[SeriesKey, Series]


def to_history(samples: Iterable[Sample]) -> dict[SeriesKey, Series]:
    """Group samples into time-ordered series (duplicates at one timestamp keep the last)."""
    points: dict[SeriesKey, dict[float, float]] = {}
    for sample in samples:
        points.setdefault(sample.key, {})[sample.ts] = sample.value
    history: dict[SeriesKey, Series] = {}
    for key, by_ts in points.items():
        ordered = sorted(by_ts.items())
        history[key] = Series(tuple(t for t, _ in ordered), tuple(v for _, v in ordered))
    return history
