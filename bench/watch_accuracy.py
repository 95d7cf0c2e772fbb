"""Accuracy of the watch detectors on replayed series: leak time-to-exhaustion error and false alarms.

Leaks: GPU memory rising linearly at steady load, for a grid of slopes (0.5-8 GiB/h), noise (50-800 MiB
sd), scrape intervals (5-60 s) and 5% wild spikes; the truth is the line's own crossing of the device
total. Look-alikes that must stay quiet: flat noisy memory, a one-off 4 GiB step, memory following a load
that triples, a sawtooth (allocate/free) pattern. KV saturation: a rising KV usage with noise, truth its
crossing of kv_high.

    python bench/watch_accuracy.py
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from oomguard.units import GiB, MiB
from oomguard.watch.detectors import Thresholds, kv_saturation, memory_leaks
from oomguard.watch.samples import Sample, to_history

T0 = 1.75e9
TOTAL = 80 * GiB
WINDOW = 3600.0


def gpu_history(
    used: Callable[[float], float],
    step: float,
    load: Callable[[float], float] | None = None,
    seconds: float = WINDOW,
) -> dict:  # type: ignore[type-arg]
    samples = []
    for i in range(int(seconds / step) + 1):
        t = i * step
        samples.append(Sample("nvml", "gpu0", "gpu_memory_used_bytes", T0 + t, used(t)))
        samples.append(Sample("nvml", "gpu0", "gpu_memory_total_bytes", T0 + t, TOTAL))
        samples.append(Sample("u", "0", "generation_tokens", T0 + t, (load or (lambda x: 1000 * x))(t)))
    return to_history(samples)


def leak_errors() -> list[tuple[str, str, str, str, str]]:
    rows = []
    t = Thresholds(horizon_s=48 * 3600)  # judge the estimate for every slope, not only the urgent ones
    for slope_gib_h, noise_mib in itertools.product((0.5, 1, 2, 4, 8), (50, 200, 800)):
        errors, missed = [], 0
        for step, seed in itertools.product((5, 15, 60), range(4)):
            rng = random.Random(seed * 1000 + int(slope_gib_h * 10) + noise_mib)
            slope = slope_gib_h * GiB / 3600
            start = 60 * GiB

            def used(
                x: float,
                rng: random.Random = rng,
                start: float = start,
                slope: float = slope,
                noise: float = noise_mib,
            ) -> float:
                spike = 3 * GiB if rng.random() < 0.05 else 0.0
                return start + slope * x + rng.gauss(0, noise * MiB) + spike

            history = gpu_history(used, step)
            now = T0 + WINDOW
            alerts = memory_leaks(history, now, t)
            truth = (TOTAL - (start + slope * WINDOW)) / slope
            if not alerts or alerts[0].eta_seconds is None:
                missed += 1
                continue
            errors.append(abs(alerts[0].eta_seconds - truth) / truth)
        rows.append(
            (
                f"{slope_gib_h:g} GiB/h",
                f"{noise_mib} MiB",
                f"{statistics.median(errors):.1%}" if errors else "-",
                f"{max(errors):.1%}" if errors else "-",
                f"{missed}/12",
            )
        )
    return rows


def false_alarms() -> list[tuple[str, str]]:
    cases: dict[
        str, Callable[[random.Random], tuple[Callable[[float], float], Callable[[float], float] | None]]
    ] = {
        "flat, 300 MiB noise": lambda r: (lambda x: 70 * GiB + r.gauss(0, 300 * MiB), None),
        "one-off 4 GiB step at 30 min": lambda r: (
            lambda x: 70 * GiB + (4 * GiB if x > 1800 else 0) + r.gauss(0, 50 * MiB),
            None,
        ),
        "memory following a tripling load": lambda r: (
            lambda x: 70 * GiB + 3 * GiB * x / 3600 + r.gauss(0, 50 * MiB),
            lambda x: 1000 * x + 0.55 * x * x,
        ),
        "sawtooth: +2 GiB then freed, every 10 min": lambda r: (
            lambda x: 70 * GiB + 2 * GiB * ((x % 600) / 600) + r.gauss(0, 50 * MiB),
            None,
        ),
    }
    rows = []
    for name, make in cases.items():
        fired = 0
        for seed in range(20):
            used, load = make(random.Random(seed))
            fired += bool(
                memory_leaks(gpu_history(used, 15, load), T0 + WINDOW, Thresholds(horizon_s=48 * 3600))
            )
        rows.append((name, f"{fired}/20"))
    return rows


def kv_errors() -> list[tuple[str, str, str]]:
    rows = []
    t = Thresholds(kv_horizon_s=4 * 3600)
    for per_min in (0.005, 0.01, 0.02):
        errors = []
        for seed in range(20):
            rng = random.Random(seed)
            samples = [
                Sample(
                    "u",
                    "0",
                    "kv_cache_usage",
                    T0 + i * 5.0,
                    min(1.0, 0.3 + per_min * i * 5 / 60 + rng.gauss(0, 0.03)),
                )
                for i in range(121)
            ]
            alerts = kv_saturation(to_history(samples), T0 + 600, t)
            truth = (t.kv_high - (0.3 + per_min * 10)) / (per_min / 60)
            if alerts and alerts[0].eta_seconds:
                errors.append(abs(alerts[0].eta_seconds - truth) / truth)
        rows.append(
            (
                f"+{per_min:.1%}/min",
                f"{statistics.median(errors):.1%}" if errors else "-",
                f"{len(errors)}/20 caught",
            )
        )
    return rows


def main() -> None:
    print("Leak time-to-exhaustion (1 h window, 12 runs per row: 3 scrape intervals x 4 seeds, 5% spikes)")
    print(f"{'slope':>10} {'noise sd':>9} {'median err':>11} {'max err':>8} {'missed':>7}")
    for row in leak_errors():
        print(f"{row[0]:>10} {row[1]:>9} {row[2]:>11} {row[3]:>8} {row[4]:>7}")
    print()
    print("False leak alarms (20 seeds each)")
    for name, fired in false_alarms():
        print(f"  {name:<46} {fired}")
    print()
    print("KV time-to-saturation (10 min window at 5 s, 3% noise)")
    for row in kv_errors():
        print(f"  {row[0]:>12}  median error {row[1]:>6}  {row[2]}")


if __name__ == "__main__":
    main()
