"""Speed of `oomguard watch`: parsing /metrics bodies, storing samples in SQLite, running the detectors.

Bodies are vLLM-format text as the test exporter renders it (prometheus_client layout, histograms, DP
engines). The store is a fresh SQLite file (WAL, synchronous=NORMAL) on this machine's disk. Detector
latency is one `evaluate()` over an hour of history at a 5 s scrape interval.

    python bench/watch_speed.py
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.watch.exporter import render, steady

from oomguard.units import GiB
from oomguard.watch.detectors import evaluate
from oomguard.watch.metrics import vllm_samples
from oomguard.watch.prom_text import parse
from oomguard.watch.samples import Sample
from oomguard.watch.store import Store


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """Best-of-3 seconds per call."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def history_samples(ranks: int, gpus: int, seconds: int, step: float) -> list[Sample]:
    rng = random.Random(1)
    out = []
    for i in range(int(seconds / step)):
        ts = 1.75e9 + i * step
        for r in range(ranks):
            for metric, value in (
                ("kv_cache_usage", 0.5 + rng.random() * 0.1),
                ("requests_running", 30.0),
                ("requests_waiting", rng.randint(0, 3)),
                ("preemptions", i * 0.01),
                ("prompt_tokens", i * 5000.0),
                ("generation_tokens", i * 400.0),
            ):
                out.append(Sample("http://127.0.0.1:8000/metrics", str(r), metric, ts, float(value)))
        for g in range(gpus):
            out.append(Sample("nvml", f"gpu{g}", "gpu_memory_used_bytes", ts, 70 * GiB + i * 1e5))
            out.append(Sample("nvml", f"gpu{g}", "gpu_memory_total_bytes", ts, 80 * GiB))
    return out


def main() -> None:
    rows: list[tuple[str, str, str]] = []
    for engines in (1, 8):
        body = render(steady(100, engines=engines)).encode()
        lines = body.count(b"\n")
        per_body = timed(lambda body=body: vllm_samples(parse(body), "u", 0.0), 200)
        rows.append(
            (
                f"parse + map a /metrics body, {engines} engine(s), {lines} lines",
                f"{per_body * 1e3:.2f} ms",
                f"{lines / per_body:,.0f} lines/s",
            )
        )

    with tempfile.TemporaryDirectory() as tmp:
        for batch in (25, 1000, 20_000):
            samples = history_samples(8, 8, 3600, 5.0)[:200_000]
            store = Store(Path(tmp) / f"b{batch}.sqlite")
            start = time.perf_counter()
            for i in range(0, len(samples), batch):
                store.add(samples[i : i + batch])
                store.flush(0.0)
            elapsed = time.perf_counter() - start
            rows.append(
                (
                    f"store {len(samples):,} samples, flushed every {batch:,}",
                    f"{elapsed:.2f} s",
                    f"{len(samples) / elapsed:,.0f} samples/s",
                )
            )
            store.close(0.0)

        store = Store(Path(tmp) / "h.sqlite")
        samples = history_samples(8, 8, 3600, 5.0)
        store.add(samples)
        store.flush(0.0)
        now = samples[-1].ts
        read = timed(lambda: store.history(now - 3600), 3)
        rows.append(
            (f"read 1 h of history ({len(samples):,} samples, 64 series)", f"{read * 1e3:.0f} ms", "")
        )
        history = store.history(now - 3600)
        latencies = []
        for _ in range(5):
            start = time.perf_counter()
            alerts = evaluate(history, now)
            latencies.append(time.perf_counter() - start)
        rows.append(
            (
                "evaluate all detectors (8 ranks, 8 GPUs, 1 h at 5 s)",
                f"{statistics.median(latencies) * 1e3:.0f} ms",
                f"{len(alerts)} alert(s)",
            )
        )

    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'time':>10}  {'rate':>18}")
    for what, t, rate in rows:
        print(f"{what:<{width}}  {t:>10}  {rate:>18}")


if __name__ == "__main__":
    main()
