"""oomguard's Prometheus text reader (watch/prom_text.py) against prometheus_client's own parser
(`prometheus_client.parser.text_string_to_metric_families`), on /metrics pages rendered by prometheus_client,
the library vLLM's exporter is written with: the same sample set, CPU time per page (same run, best of 3),
and what each does with one bad line in a page.

Pages: (1) a registry holding vLLM v1's metric families (vLLM v1/metrics/loggers.py: the request gauges,
token and preemption counters, the latency and length histograms with vLLM's buckets, cache_config_info) for
1 and 8 data-parallel engines, with the process and GC collectors, rendered by `generate_latest`; (2) the
test exporter's vLLM-format page for 8 engines (tests/watch/exporter.py).

    pip install prometheus-client  # only for this comparison
    python bench/prom_parser_compare.py
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families
from tests.watch.exporter import render, steady

from oomguard.watch.prom_text import parse

# vLLM v1's buckets (v1/metrics/loggers.py).
TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
LABELS = ("model_name", "engine")
MODEL = "meta-llama/Llama-3.1-70B-Instruct"
REPEAT = 40


def vllm_page(engines: int) -> str:
    """A /metrics page as vLLM's exporter renders it: prometheus_client's generate_latest over vLLM's
    families, values from a random load."""
    rng = random.Random(engines)
    reg = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        reg.register(collector)
    gauges = [
        Gauge(name, name, LABELS, registry=reg)
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    ]
    counters = [
        Counter(name, name, LABELS, registry=reg)
        for name in ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens")
    ]
    success = Counter("vllm:request_success", "finished", (*LABELS, "finished_reason"), registry=reg)
    histograms = [
        Histogram(name, name, LABELS, buckets=buckets, registry=reg)
        for name, buckets in (
            ("vllm:time_to_first_token_seconds", TTFT),
            ("vllm:inter_token_latency_seconds", ITL),
            ("vllm:e2e_request_latency_seconds", LATENCY),
            ("vllm:request_queue_time_seconds", LATENCY),
            ("vllm:request_inference_time_seconds", LATENCY),
            ("vllm:request_prefill_time_seconds", LATENCY),
            ("vllm:request_decode_time_seconds", LATENCY),
            ("vllm:request_prompt_tokens", TOKENS),
            ("vllm:request_generation_tokens", TOKENS),
            ("vllm:iteration_tokens_total", TOKENS),
            ("vllm:request_max_num_generation_tokens", TOKENS),
        )
    ]
    info = Info("vllm:cache_config", "cache config", registry=reg)
    info.info({"block_size": "16", "num_gpu_blocks": "27288", "gpu_memory_utilization": "0.9"})
    for engine in range(engines):
        labels = (MODEL, str(engine))
        for gauge in gauges:
            gauge.labels(*labels).set(rng.random() * 40)
        for counter in counters:
            counter.labels(*labels).inc(rng.randint(1, 10**6))
        for reason in ("stop", "length", "abort"):
            success.labels(*labels, reason).inc(rng.randint(1, 10**4))
        for histogram in histograms:
            child = histogram.labels(*labels)
            for _ in range(200):
                child.observe(rng.expovariate(0.2))
    return generate_latest(reg).decode()


def ours(page: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(s.name, s.labels, s.value) for s in parse(page).samples()}


def theirs(page: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def cpu_seconds(fn: Callable[[str], object], page: str) -> float:
    """Best of 3 CPU seconds per call (process time: the machine is shared)."""
    best = math.inf
    for _ in range(3):
        start = time.process_time()
        for _ in range(REPEAT):
            fn(page)
        best = min(best, (time.process_time() - start) / REPEAT)
    return best


def with_bad_line(page: str) -> str:
    """One sample line cut in the middle of its labels, as a proxy or a crash mid-write leaves it."""
    lines = page.split("\n")
    middle = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("vllm:"))
    lines[middle] = lines[middle][: lines[middle].index("{") + 5]
    return "\n".join(lines)


def main() -> int:
    pages = {
        "vLLM families, 1 engine (generate_latest)": vllm_page(1),
        "vLLM families, 8 engines (generate_latest)": vllm_page(8),
        "test exporter, 8 engines": render(steady(100, engines=8)),
    }
    print(
        f"{'page':<44} {'KiB':>6} {'samples':>7} {'same':>5} {'prom_text ms':>12} "
        f"{'prometheus_client ms':>21} {'ratio':>6}  one bad line: prom_text / prometheus_client"
    )
    for name, page in pages.items():
        mine, other = ours(page), theirs(page)
        same = mine == other
        t_ours, t_theirs = cpu_seconds(ours, page), cpu_seconds(theirs, page)
        bad = with_bad_line(page)
        kept = len(ours(bad))
        try:
            other_kept = str(len(theirs(bad)))
        except ValueError as err:
            other_kept = f"0 (ValueError: {str(err)[:30]}...)"
        print(
            f"{name:<44} {len(page) / 1024:>6.1f} {len(mine):>7} {'yes' if same else 'NO':>5} "
            f"{t_ours * 1e3:>12.2f} {t_theirs * 1e3:>21.2f} {t_theirs / t_ours:>5.1f}x  "
            f"{kept} of {len(mine)} samples / {other_kept}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
