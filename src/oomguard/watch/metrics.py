"""vLLM's /metrics, old names and new, -> canonical `Sample`s.

Names and meanings (vLLM `v1/metrics/loggers.py`):
- `vllm:kv_cache_usage_perc` is 1 - free/(num_blocks - 1), a fraction 0..1 despite its name. Before
  2025-06 it was `vllm:gpu_cache_usage_perc`; v0.10 serves both (the old one marked DEPRECATED), v0.11 hides
  the old one and it is gone since 2025-11. When both are served the new one wins.
- Counters are exposed with `_total` (prometheus_client); OpenMetrics-style bodies may lack it.
- `vllm:cache_config_info` is an info gauge (value 1) whose labels are CacheConfig's fields: `num_gpu_blocks`,
  `block_size`, `gpu_memory_utilization`, ... (`num_gpu_blocks` reads "None" before the KV cache is sized).
- Labels: `model_name`, and `engine` (the engine index; one API server fronting data-parallel engines
  serves one series per engine).
- `process_resident_memory_bytes` / `process_start_time_seconds` come from prometheus_client's process
  collector: they describe the API-server process, whose restart is the server's restart.

Several series of one name and one engine: counters are added (one series per `finished_reason`, or per
LoRA adapter, is how vLLM splits a total), gauges that count requests are added, a ratio never is: the
highest is kept (two `kv_cache_usage` series at 60% are not a cache 120% full). Series that differ in
`model_name` under one `engine` (a federating proxy in front of several servers) are different engines:
their engine key becomes `engine/model_name`. A value that is not finite is dropped and counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oomguard.watch.prom_text import Exposition, PromSample
from oomguard.watch.samples import METRICS, Sample

MAX_ENGINES_PER_TARGET = 512  # vLLM's largest DP deployments are a few hundred engines per API server

# canonical metric -> exposed names, preferred first
GAUGE_SOURCES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "requests_running": ("vllm:num_requests_running",),
    "requests_waiting": ("vllm:num_requests_waiting",),
}
COUNTER_SOURCES: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    # one series per finished_reason: summed per engine
    "requests_finished": ("vllm:request_success_total", "vllm:request_success"),
}
PROCESS_SOURCES: dict[str, str] = {
    "process_rss_bytes": "process_resident_memory_bytes",
    "process_start_time": "process_start_time_seconds",
}
CACHE_CONFIG_INFO = "vllm:cache_config_info"
CACHE_CONFIG_LABELS: dict[str, str] = {
    "num_gpu_blocks": "kv_num_gpu_blocks",
    "block_size": "kv_block_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
}

# Every exposed name this module reads, for Prometheus queries and for rules.
EXPOSED_NAMES: tuple[str, ...] = (
    tuple(name for names in (*GAUGE_SOURCES.values(), *COUNTER_SOURCES.values()) for name in names)
    + tuple(PROCESS_SOURCES.values())
    + (CACHE_CONFIG_INFO,)
)


@dataclass(frozen=True)
class VllmScrape:
    """What one /metrics body says about vLLM: samples, and the model served per engine."""

    samples: tuple[Sample, ...]
    models: dict[str, str]  # engine -> model_name
    vllm_found: bool  # any vllm: metric at all (a body without one is not a vLLM endpoint)
    notes: tuple[str, ...] = ()  # what was dropped or merged, for the scrape's note


def _plain_engine(sample: PromSample) -> str:
    return sample.label("engine")


class _EngineKeys:
    """engine label -> the key of a rank; `engine/model_name` where one engine label serves several models."""

    def __init__(self, by_name: dict[str, list[PromSample]]) -> None:
        models: dict[str, set[str]] = {}
        for name, samples in by_name.items():
            if name.startswith("vllm:"):
                for sample in samples:
                    if sample.label("model_name"):  # cache_config_info has none
                        models.setdefault(_plain_engine(sample), set()).add(sample.label("model_name"))
        self.split = {engine for engine, names in models.items() if len(names) > 1}

    def __call__(self, sample: PromSample) -> str:
        engine = _plain_engine(sample)
        if engine in self.split and sample.label("model_name"):
            return f"{engine}/{sample.label('model_name')}" if engine else sample.label("model_name")
        return engine


def _by_name(exposition: Exposition) -> dict[str, list[PromSample]]:
    by_name: dict[str, list[PromSample]] = {}
    for family in exposition.families:
        for sample in family.samples:
            by_name.setdefault(sample.name, []).append(sample)
    return by_name


def _first_present(
    by_name: dict[str, list[PromSample]], names: tuple[str, ...], engine_of: _EngineKeys, ratio: bool
) -> tuple[dict[str, float], int]:
    """engine -> value from the first of `names` that engine exposes, and how many values were not finite.

    Several series of one engine: a ratio keeps the highest, a count is the sum; an exact duplicate (same
    name and labels, which Prometheus refuses) counts once, the last one read."""
    values: dict[str, float] = {}
    dropped = 0
    for name in names:
        per_series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for sample in by_name.get(name, ()):
            if not math.isfinite(sample.value):
                dropped += 1
                continue
            per_series[(engine_of(sample), sample.labels)] = sample.value
        per_engine: dict[str, list[float]] = {}
        for (engine, _), value in per_series.items():
            per_engine.setdefault(engine, []).append(value)
        for engine, found in per_engine.items():
            values.setdefault(engine, max(found) if ratio else math.fsum(found))
    return values, dropped


def _cache_config(sample: PromSample) -> dict[str, float]:
    values: dict[str, float] = {}
    for label, metric in CACHE_CONFIG_LABELS.items():
        text = sample.label(label)
        try:
            value = float(text)
        except ValueError:
            continue  # "None" before the KV cache is sized
        if math.isfinite(value):
            values[metric] = value
    return values


def vllm_samples(exposition: Exposition, target: str, ts: float) -> VllmScrape:
    """Canonical samples from one scrape of a vLLM /metrics endpoint at time `ts`."""
    by_name = _by_name(exposition)
    engine_of = _EngineKeys(by_name)
    out: list[Sample] = []
    dropped = 0
    for metric, names in (*GAUGE_SOURCES.items(), *COUNTER_SOURCES.items()):
        values, bad = _first_present(by_name, names, engine_of, METRICS[metric].unit == "ratio")
        dropped += bad
        out += [Sample(target, engine, metric, ts, value) for engine, value in sorted(values.items())]
    models: dict[str, str] = {}
    for sample in by_name.get(CACHE_CONFIG_INFO, ()):
        engine = engine_of(sample)
        for metric, value in _cache_config(sample).items():
            out.append(Sample(target, engine, metric, ts, value))
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        for sample in by_name.get(name, ()):
            if sample.label("model_name"):
                models.setdefault(engine_of(sample), sample.label("model_name"))
    for metric, name in PROCESS_SOURCES.items():
        for sample in by_name.get(name, ())[:1]:  # one process per endpoint
            if math.isfinite(sample.value):
                out.append(Sample(target, "", metric, ts, sample.value))
    notes = []
    if dropped:
        notes.append(f"{dropped} value(s) not finite (NaN or Inf) dropped")
    engines = sorted({s.engine for s in out if s.engine})
    if len(engines) > MAX_ENGINES_PER_TARGET:
        kept = set(engines[:MAX_ENGINES_PER_TARGET])
        out = [s for s in out if not s.engine or s.engine in kept]
        models = {e: m for e, m in models.items() if e in kept}
        notes.append(f"{len(engines)} engines: only the first {MAX_ENGINES_PER_TARGET} are watched")
    if engine_of.split:
        notes.append(f"engine label(s) {sorted(engine_of.split)} serve several models: keyed engine/model")
    vllm_found = any(name.startswith("vllm:") for name in by_name)
    return VllmScrape(tuple(out), models, vllm_found, tuple(notes))
