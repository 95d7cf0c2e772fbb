"""vLLM `/metrics` scrapes saved to a file (Prometheus text or OpenMetrics), one or several concatenated.

The text is read by the project's one exposition parser (`oomguard.watch.prom_text`) and the names, old and
new, come from `oomguard.watch.metrics`: KV usage, running, waiting, preemptions, the
cache config, process RSS. This module only turns samples into diagnosis facts: a series seen again starts
a new scrape (people append `curl .../metrics >> scrapes.txt` in a loop), and each scrape gives one
LoadSample per engine, at the line of its first sample.
"""

from __future__ import annotations

import math

from oomguard.diagnose.evidence import Evidence, HostMemory, LoadSample, StartupNumber, Where
from oomguard.watch.metrics import CACHE_CONFIG_INFO, COUNTER_SOURCES, GAUGE_SOURCES, PROCESS_SOURCES
from oomguard.watch.prom_text import PromSample, parse

# LoadSample field -> exposed names, preferred first (v0.10 serves the old and the new KV name: new wins).
LOAD_SOURCES: dict[str, tuple[str, ...]] = {
    "kv_usage": GAUGE_SOURCES["kv_cache_usage"],
    "running": GAUGE_SOURCES["requests_running"],
    "waiting": GAUGE_SOURCES["requests_waiting"],
    "preemptions": COUNTER_SOURCES["preemptions"],
}
_SLOT_OF: dict[str, tuple[str, int]] = {
    name: (slot, rank) for slot, names in LOAD_SOURCES.items() for rank, name in enumerate(names)
}
RSS = PROCESS_SOURCES["process_rss_bytes"]
# cache_config_info labels -> startup quantities (kv_cache_size_tokens / kv_cache_max_concurrency from 0.33).
CACHE_LABELS = {
    "num_gpu_blocks": "num_gpu_blocks",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "kv_cache_max_concurrency": "max_concurrency",
}


class _Scrape:
    """The load figures of one scrape, per engine: slot -> (name preference, value, line)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.engines: dict[str, dict[str, tuple[int, float, int]]] = {}

    def is_repeat(self, sample: PromSample) -> bool:
        key = (sample.name, sample.labels)
        if key in self.seen:
            return True
        self.seen.add(key)
        return False

    def put(self, sample: PromSample, slot: str, rank: int) -> None:
        values = self.engines.setdefault(sample.label("engine"), {})
        have = values.get(slot)
        if have is None or rank < have[0]:
            values[slot] = (rank, sample.value, sample.lineno)

    def facts(self, name: str) -> list[LoadSample]:
        out = []
        for engine, values in self.engines.items():
            running, waiting = _value(values, "running"), _value(values, "waiting")
            out.append(
                LoadSample(
                    where=Where(name, min(v[2] for v in values.values())),
                    text=f"/metrics scrape ({engine or 'engine'})",
                    running=int(running) if running is not None else None,
                    waiting=int(waiting) if waiting is not None else None,
                    kv_usage=_value(values, "kv_usage"),
                    preemptions=_value(values, "preemptions"),
                    engine=engine,
                )
            )
        return out


def _value(values: dict[str, tuple[int, float, int]], slot: str) -> float | None:
    return values[slot][1] if slot in values else None


def read_document(name: str, data: bytes, evidence: Evidence) -> tuple[int, list[str]]:
    """Facts from one scrape file, and one note per line the parser skipped."""
    exposition = parse(data)
    bad = [f"line {s.lineno}: {s.reason}" for s in exposition.skipped]
    facts: list[LoadSample | HostMemory | StartupNumber] = []
    scrape = _Scrape()
    for sample in sorted(exposition.samples(), key=lambda s: s.lineno):
        if not math.isfinite(sample.value):
            # NaN is "no value yet"; an infinite gauge or counter is no count a server can have
            if not math.isnan(sample.value):
                bad.append(f"line {sample.lineno}: {sample.name} is {sample.value}, not a finite number")
            continue
        if scrape.is_repeat(sample):
            facts += scrape.facts(name)
            scrape = _Scrape()
            scrape.is_repeat(sample)
        where = Where(name, sample.lineno)
        if sample.name in _SLOT_OF:
            scrape.put(sample, *_SLOT_OF[sample.name])
        elif sample.name == RSS:
            facts.append(
                HostMemory(
                    where=where,
                    text=f"{sample.name} {sample.value:.0f}",
                    quantity="rss",
                    value=sample.value,
                    scope="process",
                )
            )
        elif sample.name == CACHE_CONFIG_INFO:
            facts += _cache_config(where, sample)
    facts += scrape.facts(name)
    evidence.extend(facts)
    return len(facts), bad


def _cache_config(where: Where, sample: PromSample) -> list[StartupNumber]:
    out = []
    for label, quantity in CACHE_LABELS.items():
        try:
            value = float(sample.label(label))
        except ValueError:
            continue  # absent, or "None" before the KV cache is sized
        if math.isfinite(value):
            out.append(
                StartupNumber(
                    where=where,
                    text=f"{CACHE_CONFIG_INFO} {label}={sample.label(label)}",
                    quantity=quantity,
                    value=value,
                    process_tag=sample.label("engine"),
                )
            )
    return out
