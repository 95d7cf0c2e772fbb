"""`oomguard rules` and `watch --prometheus` against a real Prometheus scraping a local vLLM-format exporter.

One Prometheus for the module: it scrapes the exporter every second (two DP engines, one hot, preempting,
its queue growing), holds an hour of dcgm-exporter GPU memory history written in with promtool's backfill
(one GPU leaking, one flat), and loads the generated rules.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.run_oomguard import oomguard

from oomguard.watch.detectors import Thresholds
from oomguard.watch.prom_rules import RuleOptions, rules_yaml

from .exporter import EngineState, Exporter, ServerState
from .prom_server import Prometheus, backfill, need

FB_TOTAL_MIB = 81_559  # an H100 80GB as dcgm-exporter reports it (used + free)
LEAK_MIB_PER_STEP, STEP_S = 10.0, 15.0
RULE_ARGS = [
    "--for",
    "0s",
    "--preemption-window",
    "15s",
    "--imbalance-window",
    "15s",
    "--queue-window",
    "15s",
]


def scenario(n: int) -> ServerState:
    return ServerState(
        engines={
            "0": EngineState(
                kv_usage=0.45, running=10, waiting=0, prompt_tokens=900.0 * n, generation_tokens=80.0 * n
            ),
            "1": EngineState(
                kv_usage=0.75,
                running=30,
                waiting=5 + n,
                preemptions=5.0 * n,
                prompt_tokens=2700.0 * n,
                generation_tokens=240.0 * n,
            ),
        }
    )


def dcgm_history(end: float) -> tuple[str, float]:
    """An hour of DCGM framebuffer gauges ending at `end`; returns the text and the true seconds to
    exhaustion."""
    rng = random.Random(5)
    lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    used: dict[str, list[float]] = {"0": [], "1": []}
    points = int(3600 / STEP_S)
    for gpu in ("0", "1"):
        for i in range(points + 1):
            value = (70_000 + LEAK_MIB_PER_STEP * i if gpu == "0" else 60_000) + round(rng.gauss(0, 30))
            used[gpu].append(value)
    labels = lambda gpu: f'{{Hostname="gpu-node-1",gpu="{gpu}",instance="gpu-node-1:9400",job="dcgm"}}'
    for gpu in ("0", "1"):
        for i, value in enumerate(used[gpu]):
            lines.append(f"DCGM_FI_DEV_FB_USED{labels(gpu)} {value:.0f} {end - (points - i) * STEP_S:.0f}")
    lines.append("# TYPE DCGM_FI_DEV_FB_FREE gauge")
    for gpu in ("0", "1"):
        for i, value in enumerate(used[gpu]):
            lines.append(
                f"DCGM_FI_DEV_FB_FREE{labels(gpu)} {FB_TOTAL_MIB - value:.0f} "
                f"{end - (points - i) * STEP_S:.0f}"
            )
    lines.append("# EOF")
    true_used_now = 70_000 + LEAK_MIB_PER_STEP * points
    return "\n".join(lines) + "\n", (FB_TOTAL_MIB - true_used_now) / (LEAK_MIB_PER_STEP / STEP_S)


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "oomguard-rules.yml"
    result = oomguard("rules", "-o", str(path), *RULE_ARGS)
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, rules_file: Path) -> Iterator[tuple[Prometheus, float]]:
    need("prometheus")
    work = tmp_path_factory.mktemp("prometheus")
    end = float(int(time.time()) - 20)
    history, truth = dcgm_history(end)
    exporter = Exporter(scenario).start()
    prometheus = Prometheus(work, [f"127.0.0.1:{exporter.port}"], rules_file)
    backfill(history, prometheus.data, work)
    prometheus.start()
    try:
        yield prometheus, truth
    finally:
        prometheus.stop()
        exporter.stop()


def test_generated_rules_pass_promtool_check(rules_file: Path, tmp_path: Path) -> None:
    custom = tmp_path / "custom.yml"
    custom.write_text(
        rules_yaml(
            Thresholds(horizon_s=3 * 3600, kv_high=0.9, imbalance=0.2),
            RuleOptions(selector='job="vllm",namespace=~"prod-.*"', gpu_selector='Hostname!=""'),
        )
    )
    for path in (rules_file, custom):
        result = subprocess.run(
            [need("promtool"), "check", "rules", str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0 and "SUCCESS: 20 rules found" in result.stdout, (
            result.stdout + result.stderr
        )


def _all_rules(data: dict) -> list[dict]:
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_prometheus_loads_the_rules_and_every_one_evaluates_cleanly(stack: tuple[Prometheus, float]) -> None:
    prometheus, _ = stack
    data = prometheus.wait_for(
        "/api/v1/rules",
        lambda d: (
            len(_all_rules(d)) == 20
            and all(
                r.get("lastEvaluation", "").startswith("2") and not r["lastEvaluation"].startswith("0001")
                for r in _all_rules(d)
            )
        ),
    )
    rules = _all_rules(data)
    assert len(rules) == 20
    assert [(r["name"], r.get("lastError", "")) for r in rules if r["health"] != "ok"] == []


def test_recording_rules_keep_kv_usage_per_engine(stack: tuple[Prometheus, float]) -> None:
    prometheus, _ = stack
    query = "/api/v1/query?query=oomguard:vllm_kv_cache_usage:ratio"
    data = prometheus.wait_for(query, lambda d: len(d["result"]) == 2)
    values = {r["metric"]["engine"]: float(r["value"][1]) for r in data["result"]}
    assert values == {"0": 0.45, "1": 0.75}


def _firing(data: dict) -> dict[str, list[dict]]:
    firing: dict[str, list[dict]] = {}
    for alert in data["alerts"]:
        if alert["state"] == "firing":
            firing.setdefault(alert["labels"]["alertname"], []).append(alert)
    return firing


def test_alerts_fire_for_preemptions_queue_imbalance_and_the_leak(stack: tuple[Prometheus, float]) -> None:
    prometheus, truth = stack
    wanted = {"OomguardPreemptions", "OomguardDpImbalance", "OomguardQueueGrowing", "OomguardGpuMemoryLeak"}
    data = prometheus.wait_for("/api/v1/alerts", lambda d: wanted <= set(_firing(d)), timeout=30)
    firing = _firing(data)
    assert wanted <= set(firing), sorted(firing)
    assert [a["labels"]["engine"] for a in firing["OomguardPreemptions"]] == ["1"]
    assert [a["labels"]["engine"] for a in firing["OomguardQueueGrowing"]] == ["1"]
    [leak] = firing["OomguardGpuMemoryLeak"]  # the flat GPU 1 stays quiet
    assert leak["labels"]["gpu"] == "0"
    assert float(leak["value"]) == pytest.approx(truth, rel=0.2)
    assert "OomguardKvCacheFull" not in firing and "OomguardVllmRestarted" not in firing


def test_watch_on_prometheus_runs_the_same_detectors(stack: tuple[Prometheus, float]) -> None:
    prometheus, truth = stack
    prometheus.wait_for("/api/v1/query?query=vllm:num_preemptions_total", lambda d: len(d["result"]) == 2)
    time.sleep(4)  # a few scrapes of the live exporter so the 15 s windows hold several points
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomguard",
            "watch",
            "--prometheus",
            prometheus.url,
            "--once",
            "--json",
            "--preemption-window",
            "15s",
            "--imbalance-window",
            "15s",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    alerts = [json.loads(line) for line in result.stdout.splitlines()]
    by_detector = {a["detector"]: a for a in alerts}
    assert {"memory_leak", "preemptions", "dp_imbalance"} <= set(by_detector), result.stdout
    assert by_detector["memory_leak"]["subject"] == "gpu-node-1 engine gpu0"
    assert by_detector["memory_leak"]["eta_seconds"] == pytest.approx(truth, rel=0.2)
    assert by_detector["preemptions"]["subject"].endswith("engine 1")
    assert by_detector["dp_imbalance"]["subject"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_an_unreachable_prometheus_is_one_line_and_exit_2() -> None:
    from .prom_server import free_port

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomguard",
            "watch",
            "--prometheus",
            f"http://127.0.0.1:{free_port()}",
            "--once",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines() == [result.stderr.strip()]
        and "connection refused" in result.stderr
    )


def test_a_continuous_watch_on_an_unreachable_prometheus_logs_and_retries() -> None:
    from .prom_server import free_port

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "oomguard",
            "watch",
            "--prometheus",
            f"http://127.0.0.1:{free_port()}",
            "--count",
            "2",
            "--interval",
            "0.1s",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert result.stderr.count("retrying in") == 2
