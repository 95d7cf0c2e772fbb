"""`watch --prometheus URL`: the detectors' series from an existing Prometheus, through /api/v1/query_range.

One range query per canonical metric (old and new vLLM names joined with `or`, which matches label sets
without the metric name, so a v0.10 server serving both is counted once). Series are keyed by the
`instance` label (the scraped endpoint) and vLLM's `engine` label, exactly as `watch URL...` keys them, so the
same detectors judge both. GPU memory comes from NVIDIA's dcgm-exporter (`DCGM_FI_DEV_FB_USED` /
`DCGM_FI_DEV_FB_FREE`, in MiB) where Prometheus has it.

Every query has a deadline for the whole exchange and a size limit; an answer of the wrong shape (a result
that is not an object, a value that is not a number, JSON nested too deep) is a `PrometheusError`, retried
like an unreachable server, never a crash of a long-running watcher.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from typing import Any

from oomguard.errors import OomguardError
from oomguard.units import MiB
from oomguard.watch.http_fetch import FetchError, fetch
from oomguard.watch.metrics import CACHE_CONFIG_INFO, CACHE_CONFIG_LABELS
from oomguard.watch.samples import RankKey, Sample, Series, SeriesKey, to_history
from oomguard.watch.scrape import failure_reason

MAX_POINTS_PER_SERIES = 1000  # Prometheus refuses more than 11,000; detectors reduce to a few hundred anyway
MIN_STEP_S = 1.0
# An answer of 2,000 series x 1,000 points is about 60 MB of JSON; more means the selector is too wide,
# and parsing it would cost gigabytes.
MAX_ANSWER_BYTES = 32 << 20
MAX_SERIES_PER_QUERY = 4096


class PrometheusError(OomguardError):
    """Prometheus could not be reached or refused a query."""


def with_selector(metric: str, selector: str) -> str:
    """'vllm:x' + '{job="vllm"}' -> 'vllm:x{job="vllm"}'."""
    selector = selector.strip()
    if not selector:
        return metric
    if not (selector.startswith("{") and selector.endswith("}")):
        selector = "{" + selector + "}"
    return metric + selector


def queries(selector: str = "", gpu_selector: str = "") -> dict[str, str]:
    """canonical metric -> PromQL returning one series per (instance, engine)."""

    def s(name: str) -> str:
        return with_selector(name, selector)

    vllm_targets = f"group by (instance, job) ({s('vllm:num_requests_running')})"
    return {
        "kv_cache_usage": f"{s('vllm:kv_cache_usage_perc')} or {s('vllm:gpu_cache_usage_perc')}",
        "requests_running": s("vllm:num_requests_running"),
        "requests_waiting": s("vllm:num_requests_waiting"),
        "preemptions": s("vllm:num_preemptions_total"),
        "prompt_tokens": s("vllm:prompt_tokens_total"),
        "generation_tokens": s("vllm:generation_tokens_total"),
        "requests_finished": f"sum without (finished_reason) ({s('vllm:request_success_total')})",
        "process_rss_bytes": f"process_resident_memory_bytes and on (instance, job) {vllm_targets}",
        "process_start_time": f"process_start_time_seconds and on (instance, job) {vllm_targets}",
        "gpu_memory_used_bytes": f"{with_selector('DCGM_FI_DEV_FB_USED', gpu_selector)} * {MiB}",
        "gpu_memory_total_bytes": f"({with_selector('DCGM_FI_DEV_FB_USED', gpu_selector)} + "
        f"{with_selector('DCGM_FI_DEV_FB_FREE', gpu_selector)}) * {MiB}",
    }


def _key(metric_labels: dict[str, str], metric: str) -> SeriesKey:
    target = metric_labels.get("instance") or metric_labels.get("job") or "prometheus"
    if metric.startswith("gpu_"):
        engine = "gpu" + metric_labels.get("gpu", metric_labels.get("device", "?"))
        target = metric_labels.get("Hostname") or target
    else:
        engine = metric_labels.get("engine", "")
    return SeriesKey(target, engine, metric)


class PrometheusSource:
    def __init__(
        self, url: str, *, selector: str = "", gpu_selector: str = "", timeout: float = 10.0
    ) -> None:
        try:
            parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
            _ = parts.port  # checked only when asked
        except ValueError as err:  # an unclosed IPv6 bracket, a port that is not a number
            raise PrometheusError(f"{url!r} is not a Prometheus URL ({err})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PrometheusError(f"{url!r} is not a Prometheus URL (e.g. http://localhost:9090)")
        self.base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.selector = selector
        self.gpu_selector = gpu_selector
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            body = fetch(url, deadline=time.monotonic() + self.timeout, max_bytes=MAX_ANSWER_BYTES).body
        except FetchError as err:
            body = err.body  # Prometheus answers bad queries with 400/422 and a JSON error
            if err.status is None or not body.lstrip().startswith(b"{"):
                raise PrometheusError(f"Prometheus at {self.base}: {failure_reason(err)}") from None
        except Exception as err:  # noqa: BLE001 - refused, timeout, DNS: one line for the user
            raise PrometheusError(f"cannot reach Prometheus at {self.base}: {failure_reason(err)}") from None
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, nesting too deep
            raise PrometheusError(
                f"{self.base} did not answer with Prometheus API JSON (got {body[:60]!r})"
            ) from None
        if not isinstance(payload, dict) or payload.get("status") != "success":
            error = payload.get("error", "unknown error") if isinstance(payload, dict) else "not an object"
            raise PrometheusError(f"Prometheus refused {params.get('query', path)!r}: {str(error)[:200]}")
        return payload.get("data")

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The result series, each checked: `metric` an object of strings, `values` a list of pairs."""
        data = self._get(
            "/api/v1/query_range",
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(f"unexpected answer to {query!r}: not a matrix")
        result = data.get("result", [])
        if not isinstance(result, list):
            raise PrometheusError(f"unexpected answer to {query!r}: result is not a list")
        if len(result) > MAX_SERIES_PER_QUERY:
            raise PrometheusError(
                f"{query!r} returned {len(result)} series (more than {MAX_SERIES_PER_QUERY}): narrow "
                "--selector"
            )
        for series in result:
            if not (
                isinstance(series, dict)
                and isinstance(series.get("metric", {}), dict)
                and all(isinstance(v, str) for v in series.get("metric", {}).values())
                and isinstance(series.get("values") or [], list)
            ):
                raise PrometheusError(f"unexpected answer to {query!r}: a series is not {{metric, values}}")
        return result

    def history(self, start: float, end: float) -> tuple[dict[SeriesKey, Series], dict[RankKey, str]]:
        """Every detector series over [start, end], and the model each (instance, engine) serves."""
        step = max(MIN_STEP_S, math.ceil((end - start) / MAX_POINTS_PER_SERIES))
        samples: list[Sample] = []
        for metric, query in queries(self.selector, self.gpu_selector).items():
            for series in self.query_range(query, start, end, step):
                key = _key(series.get("metric", {}), metric)
                for ts, value in _points(series, query):
                    samples.append(Sample(key.target, key.engine, key.metric, ts, value))
        models: dict[RankKey, str] = {}
        for series in self.query_range(with_selector(CACHE_CONFIG_INFO, self.selector), start, end, step):
            labels = series.get("metric", {})
            key = _key(labels, "kv_num_gpu_blocks")
            points = _points(series, CACHE_CONFIG_INFO)
            for label, metric in CACHE_CONFIG_LABELS.items():
                try:
                    number = float(labels.get(label, "nan"))
                except ValueError:
                    continue
                if math.isfinite(number):
                    samples += [Sample(key.target, key.engine, metric, ts, number) for ts, _ in points]
        for series in self.query_range(
            with_selector("vllm:num_requests_running", self.selector), start, end, step
        ):
            labels = series.get("metric", {})
            if labels.get("model_name"):
                models[_key(labels, "requests_running").rank] = labels["model_name"]
        return to_history(s for s in samples if not s.problem()), models


def _points(series: dict[str, Any], query: str) -> list[tuple[float, float]]:
    """The finite (timestamp, value) pairs of one series; a pair of the wrong shape is an error."""
    out = []
    for pair in series.get("values") or []:
        try:
            ts, value = pair
            point = (float(ts), float(value))
        except (TypeError, ValueError):
            raise PrometheusError(
                f"unexpected answer to {query!r}: {str(pair)[:60]} is not a [timestamp, value] pair"
            ) from None
        if math.isfinite(point[0]) and math.isfinite(point[1]):
            out.append(point)
    return out
