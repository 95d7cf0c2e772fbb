"""vLLM `/metrics` scrapes saved to a file (Prometheus text or OpenMetrics), one or several concatenated.

The text is read by the project's one exposition parser (`oomguard.watch.prom_text`) and the names, old and
new, come from `oomguard.watch.metrics`: KV usage, running, waiting, preemptions, the
cache config, process RSS. This module only turns samples into diagnosis facts: a series seen again starts
a new scrape (people append `curl .../metrics >> scrapes.txt` in a loop), and each scrape gives one
LoadSample per engine, at the line of its first sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from oomguard.diagnosis.evidence import Evidence, HostMemory, LoadSample, StartupNumber, Where
from oomguard.watch.metrics import (
    CACHE_CONFIG_INFO,
    COUNTER_SOURCES,
    GAUGE_SOURCES,
    MAX_ENGINES_PER_TARGET,
    PROCESS_SOURCES,
)
from oomguard.watch.prom_text import CUT_SHORT, PromSample, SkippedLine, iter_exposition

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


# A scrape holds a few thousand series (vLLM's families x its engines); past this many, a "scrape" is no
# scrape but a stream of new series, and the set that finds repeats would grow with the file.
MAX_SERIES_PER_SCRAPE = 1 << 20


class _Scrape:
    """The load figures of one scrape, per engine: slot -> (name preference, value, line)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()  # hashes of (name, labels): 8 bytes a series, not the series
        self.engines: dict[str, dict[str, tuple[int, float, int]]] = {}
        self.dropped_engines = 0

    def is_repeat(self, sample: PromSample) -> bool:
        key = hash((sample.name, sample.labels))
        if key in self.seen or len(self.seen) >= MAX_SERIES_PER_SCRAPE:
            return True
        self.seen.add(key)
        return False

    def put(self, sample: PromSample, slot: str, rank: int) -> None:
        engine = sample.label("engine")
        values = self.engines.get(engine)
        if values is None:
            if len(self.engines) >= MAX_ENGINES_PER_TARGET:
                self.dropped_engines += 1
                return
            values = self.engines[engine] = {}
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


@dataclass
class MetricsRead:
    """What reading one scrape file gave: facts added, lines read, and the lines it could not use."""

    facts: int = 0
    lines: int = 0
    bad: int = 0
    first_bad: str = (
        ""  # the cut last line if there is one, else the first skipped, else the first non-finite
    )
    first_skipped: str = ""
    first_not_finite: str = ""
    cut: str = ""
    dropped_engines: int = 0

    def note(self, kind: str, text: str) -> None:
        self.bad += 1
        if kind == "cut":
            self.cut = text
        elif kind == "skipped" and not self.first_skipped:
            self.first_skipped = text
        elif kind == "not finite" and not self.first_not_finite:
            self.first_not_finite = text
        self.first_bad = self.cut or self.first_skipped or self.first_not_finite


def read_document(name: str, chunks: Iterable[bytes], evidence: Evidence) -> MetricsRead:
    """Facts from one scrape file, given as line-aligned chunks and read as they come: memory stays that of
    one scrape whatever the file's size (people append `curl .../metrics >> scrapes.txt` for days)."""
    read = MetricsRead()
    scrape = _Scrape()
    before = len(evidence)
    for item in iter_exposition(_counting(chunks, read)):
        if isinstance(item, SkippedLine):
            read.note("cut" if item.reason == CUT_SHORT else "skipped", f"line {item.lineno}: {item.reason}")
            continue
        sample = item
        if not math.isfinite(sample.value):
            # NaN is "no value yet"; an infinite gauge or counter is no count a server can have
            if not math.isnan(sample.value):
                text = f"line {sample.lineno}: {sample.name} is {sample.value}, not a finite number"
                read.note("not finite", text)
            continue
        if scrape.is_repeat(sample):
            read.dropped_engines += scrape.dropped_engines
            evidence.extend(scrape.facts(name))
            scrape = _Scrape()
            scrape.is_repeat(sample)
        where = Where(name, sample.lineno)
        if sample.name in _SLOT_OF:
            scrape.put(sample, *_SLOT_OF[sample.name])
        elif sample.name == RSS:
            evidence.add(
                HostMemory(
                    where=where,
                    text=f"{sample.name} {sample.value:.0f}",
                    quantity="rss",
                    value=sample.value,
                    scope="process",
                )
            )
        elif sample.name == CACHE_CONFIG_INFO:
            evidence.extend(_cache_config(where, sample))
    read.dropped_engines += scrape.dropped_engines
    evidence.extend(scrape.facts(name))
    read.facts = len(evidence) - before
    return read


def _counting(chunks: Iterable[bytes], read: MetricsRead) -> Iterator[bytes]:
    for chunk in chunks:
        read.lines += chunk.count(b"\n")
        yield chunk


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
