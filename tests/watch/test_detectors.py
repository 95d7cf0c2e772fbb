"""Detectors over replayed series: each fires on its mechanism, with the right numbers, and not on
look-alikes."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from oomguard.units import GiB, MiB
from oomguard.watch.detectors import (
    CRITICAL,
    Thresholds,
    dp_imbalance,
    evaluate,
    host_memory,
    host_memory_growth,
    kv_saturation,
    memory_leaks,
    preemptions,
    queue_growth,
    restarts,
)
from oomguard.watch.samples import RankKey, Sample, Series, to_history
from oomguard.watch.trend import theil_sen

T0 = 1_750_000_000.0
STEP = 15.0  # seconds between scrapes
URL = "http://127.0.0.1:8000/metrics"


def replay(seconds: float, **metrics: Callable[[float], float]) -> list[Sample]:
    """Samples every STEP seconds for each metric given as a function of elapsed time; names
    'target__engine__metric'."""
    out = []
    for i in range(int(seconds // STEP) + 1):
        t = i * STEP
        for name, fn in metrics.items():
            target, engine, metric = name.split("__")
            out.append(
                Sample({"url": URL, "nvml": "nvml", "host": "host"}[target], engine, metric, T0 + t, fn(t))
            )
    return out


def steady_tokens(t: float) -> float:
    return 2000.0 * t


def test_theil_sen_ignores_outliers_that_would_tilt_least_squares() -> None:
    rng = random.Random(7)
    ts = tuple(float(i) for i in range(100))
    values = [2.0 * t + rng.gauss(0, 0.5) for t in ts]
    for i in range(0, 100, 9):
        values[i] += 500.0  # 12% wild spikes
    trend = theil_sen(Series(ts, tuple(values)))
    assert trend is not None and trend.slope == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_gpu_leak_at_steady_load_is_caught_with_its_time_to_exhaustion(seed: int) -> None:
    rng = random.Random(seed)
    total, start, slope = 80 * GiB, 68 * GiB, 2.5 * GiB / 3600
    samples = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: start + slope * t + rng.gauss(0, 200 * MiB),
        nvml__gpu0__gpu_memory_total_bytes=lambda t: total,
        url__0__generation_tokens=steady_tokens,
    )
    now = T0 + 3600
    [alert] = memory_leaks(to_history(samples), now, Thresholds())
    truth = (total - (start + slope * 3600)) / slope
    assert alert.detector == "memory_leak" and alert.subject == "nvml engine gpu0"
    assert alert.eta_seconds == pytest.approx(truth, rel=0.2)
    assert alert.value == pytest.approx(slope, rel=0.2)


def test_a_one_off_allocation_is_not_a_leak() -> None:
    samples = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: 70 * GiB + (4 * GiB if t > 1800 else 0),
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
    )
    assert memory_leaks(to_history(samples), T0 + 3600, Thresholds()) == []


def test_memory_that_follows_a_rising_load_is_not_a_leak() -> None:
    samples = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: 70 * GiB + 2.5 * GiB * t / 3600,
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
        url__0__generation_tokens=lambda t: 1000.0 * t + 2.0 * t * t,
    )  # rate triples
    assert memory_leaks(to_history(samples), T0 + 3600, Thresholds()) == []


def test_a_leak_far_beyond_the_horizon_stays_quiet_and_a_near_one_is_critical() -> None:
    slow = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: 40 * GiB + 1 * GiB * t / 3600,
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
    )
    assert memory_leaks(to_history(slow), T0 + 3600, Thresholds()) == []
    fast = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: 70 * GiB + 8 * GiB * t / 3600,
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
    )
    [alert] = memory_leaks(to_history(fast), T0 + 3600, Thresholds())
    assert alert.severity == CRITICAL and alert.eta_seconds is not None and alert.eta_seconds < 3600


def test_the_leak_window_restarts_after_a_restart_drops_memory() -> None:
    # leaked before a restart at 30 min, flat after it: nothing to report now
    samples = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: (
            (60 * GiB + 10 * GiB * t / 1800) if t < 1800 else 60 * GiB
        ),
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
    )
    assert memory_leaks(to_history(samples), T0 + 3600, Thresholds()) == []


def test_host_memory_growth_gives_the_time_to_the_cgroup_limit() -> None:
    samples = replay(
        3600,
        host____process_rss_bytes=lambda t: 8 * GiB + 3 * GiB * t / 3600,
        host____cgroup_limit_bytes=lambda t: 20 * GiB,
    )
    [alert] = host_memory_growth(to_history(samples), T0 + 3600, Thresholds())
    assert alert.detector == "host_memory_growth" and alert.severity == "warning"
    assert alert.eta_seconds == pytest.approx((20 - 11) * 3600 / 3, rel=0.05)
    assert memory_leaks(to_history(samples), T0 + 3600, Thresholds()) == []  # one detector, not two


def test_kv_usage_rising_towards_full_gives_time_to_saturation() -> None:
    samples = replay(
        600, url__0__kv_cache_usage=lambda t: 0.40 + 0.0005 * t, url__0__kv_num_gpu_blocks=lambda t: 27_288.0
    )
    [alert] = kv_saturation(to_history(samples), T0 + 600, Thresholds())
    assert alert.eta_seconds == pytest.approx((0.95 - 0.70) / 0.0005, rel=0.1)
    assert any("27288 blocks" in line for line in alert.evidence)


def test_kv_usage_at_the_top_is_reported_as_full() -> None:
    samples = replay(600, url__0__kv_cache_usage=lambda t: 0.97)
    [alert] = kv_saturation(to_history(samples), T0 + 600, Thresholds())
    assert alert.eta_seconds == 0.0 and "97% full" in alert.summary


def test_busy_but_flat_kv_usage_is_quiet() -> None:
    samples = replay(600, url__0__kv_cache_usage=lambda t: 0.8 + 0.05 * ((t // STEP) % 2))
    assert kv_saturation(to_history(samples), T0 + 600, Thresholds()) == []


def test_a_growing_queue_with_full_kv_is_called_kv_bound() -> None:
    samples = replay(
        300,
        url__0__requests_waiting=lambda t: 2 + t / 10,
        url__0__requests_running=lambda t: 64.0,
        url__0__kv_cache_usage=lambda t: 0.96,
    )
    [alert] = queue_growth(to_history(samples), T0 + 300, Thresholds())
    assert "KV-bound" in alert.evidence[1]
    assert alert.eta_seconds == pytest.approx((100 - 32) * 10, rel=0.1)


def test_preemptions_faster_than_the_threshold_alert_counting_across_a_reset() -> None:
    samples = replay(300, url__0__preemptions=lambda t: (t / 20) if t < 150 else (t - 150) / 20)
    [alert] = preemptions(to_history(samples), T0 + 300, Thresholds())
    assert alert.value == pytest.approx(3.0, rel=0.1)  # per minute


def test_data_parallel_ranks_more_than_15_percent_apart_are_flagged() -> None:
    samples = replay(
        300,
        url__0__kv_cache_usage=lambda t: 0.50,
        url__1__kv_cache_usage=lambda t: 0.62,
        url__0__requests_running=lambda t: 20.0,
        url__1__requests_running=lambda t: 21.0,
    )
    models = {RankKey(URL, "0"): "m", RankKey(URL, "1"): "m"}
    [alert] = dp_imbalance(to_history(samples), T0 + 300, Thresholds(), models)
    assert alert.value == pytest.approx(0.12 / 0.56, rel=0.01)
    assert "engine 1" in alert.summary


def test_ranks_within_15_percent_or_idle_are_not_flagged() -> None:
    close = replay(300, url__0__kv_cache_usage=lambda t: 0.50, url__1__kv_cache_usage=lambda t: 0.55)
    assert dp_imbalance(to_history(close), T0 + 300, Thresholds(), {}) == []
    idle = replay(300, url__0__kv_cache_usage=lambda t: 0.01, url__1__kv_cache_usage=lambda t: 0.03)
    assert dp_imbalance(to_history(idle), T0 + 300, Thresholds(), {}) == []


def test_host_memory_near_the_limit_and_oom_kills() -> None:
    samples = replay(
        120,
        host____cgroup_memory_bytes=lambda t: 19 * GiB,
        host____cgroup_limit_bytes=lambda t: 20 * GiB,
        host____oom_kills=lambda t: 0.0 if t < 60 else 1.0,
    )
    alerts = host_memory(to_history(samples), T0 + 120, Thresholds())
    assert {(a.severity, a.summary.split(" ")[1]) for a in alerts} == {
        ("critical", "OOM"),
        ("critical", "memory"),
    }


def test_a_counter_reset_and_a_new_start_time_are_one_restart() -> None:
    samples = replay(
        600,
        url__0__prompt_tokens=lambda t: 1000 * (t if t < 300 else t - 300),
        url____process_start_time=lambda t: T0 - 100 if t < 300 else T0 + 300,
    )
    [alert] = restarts(to_history(samples), T0 + 600, Thresholds())
    assert alert.value == 1 and alert.extra["last_restart"] == T0 + 300


def test_evaluate_puts_critical_alerts_first() -> None:
    samples = replay(
        3600,
        nvml__gpu0__gpu_memory_used_bytes=lambda t: 70 * GiB + 8 * GiB * t / 3600,
        nvml__gpu0__gpu_memory_total_bytes=lambda t: 80 * GiB,
        url__0__kv_cache_usage=lambda t: 0.99,
    )
    alerts = evaluate(to_history(samples), T0 + 3600)
    assert [a.detector for a in alerts] == ["memory_leak", "kv_saturation"]
